"""SGLang's diffusion runtime entries without SGLang: its DiT attention implementations mapped onto the sdpa slot
([B, S, H, D] <-> [B, H, L, D]), what stays stock and why, and the SRT adapters it shares."""
from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import torch

from fk_adapters import probe
from fk_adapters.engines.sglang import diffusion_targets, targets
from fk_adapters.tasks import SLOTS


@pytest.fixture(autouse=True)
def _clean_probe():
    for c in (probe.calls, probe.constructed, probe.not_routed, probe.stock_layers, probe.traced):
        c.clear()


def _hook(cls_name):
    target = next(t for t in diffusion_targets.TARGETS if t.cls.endswith(cls_name))
    seen = []

    def op(*args):
        seen.append(args)
        return SLOTS["sdpa"].reference(*args)

    return targets.make_hook(target, {"sdpa": op}), seen


def _stock(*args, **kwargs):
    return "stock"


def _qkv(b=2, s=7, hq=4, hkv=2, d=32, sk=None):
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(b, s, hq, d, generator=gen), torch.randn(b, sk or s, hkv, d, generator=gen),
            torch.randn(b, sk or s, hkv, d, generator=gen))


def _torch_sdpa(q, k, v, causal, scale):
    """What SGLang's own SDPAImpl computes on [B, S, H, D] (torch's kernel, GQA enabled)."""
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           is_causal=causal, scale=scale, enable_gqa=True)
    return out.transpose(1, 2)


@pytest.mark.parametrize("cls_name,causal", [("FlashAttentionImpl", False), ("FlashAttentionImpl", True),
                                             ("SDPAImpl", False)])
def test_a_dense_dit_attention_call_runs_the_slot_on_transposed_views(cls_name, causal):
    hook, seen = _hook(cls_name)
    q, k, v = _qkv()
    impl = NS(causal=causal, softmax_scale=0.2, dropout=0.0)
    out = hook(_stock, impl, q, k, v, None)
    (args,) = seen
    assert args[0].shape == (2, 4, 7, 32) and args[3:] == (None, causal, 0.2)  # [B, H, L, D], no mask
    assert out.shape == q.shape and out.is_contiguous()
    torch.testing.assert_close(out, _torch_sdpa(q, k, v, causal, 0.2), atol=1e-5, rtol=1e-5)
    assert not probe.not_routed


def test_flash_attention_metadata_that_matches_the_tensors_routes():
    hook, seen = _hook("FlashAttentionImpl")
    q, k, v = _qkv()
    md = NS(max_seqlen_q=7, max_seqlen_k=7)
    assert hook(_stock, NS(causal=False, softmax_scale=0.2), q, k, v, md) is not None and seen


@pytest.mark.parametrize("case,why", [
    ({"return_softmax_lse": True}, "unknown argument 'return_softmax_lse'"),
    ({"attn_metadata": NS(max_seqlen_q=5, max_seqlen_k=7)}, "metadata sequence lengths"),
    ({"causal": True, "sk": 9}, "bottom-right"),
    ({"hq": 3}, "3 query heads over 2 kv heads"),
])
def test_flash_attention_calls_the_slot_cannot_express_stay_stock_with_why(case, why):
    hook, seen = _hook("FlashAttentionImpl")
    q, k, v = _qkv(hq=case.get("hq", 4), sk=case.get("sk"))
    impl = NS(causal=case.get("causal", False), softmax_scale=0.2)
    kwargs = {"return_softmax_lse": True} if case.get("return_softmax_lse") else {}
    assert hook(_stock, impl, q, k, v, case.get("attn_metadata"), **kwargs) == "stock" and not seen
    assert any(k.startswith("sdpa (call") and why in k for k in probe.not_routed)


def test_torch_sdpa_with_dropout_stays_stock():
    hook, seen = _hook("SDPAImpl")
    q, k, v = _qkv()
    assert hook(_stock, NS(causal=False, softmax_scale=0.2, dropout=0.1), q, k, v, None) == "stock" and not seen
    assert any(k.startswith("sdpa (call") and "dropout 0.1" in k for k in probe.not_routed)


def test_no_kernel_chosen_for_sdpa_leaves_every_call_stock_uncounted():
    target = next(t for t in diffusion_targets.TARGETS if t.cls.endswith("FlashAttentionImpl"))
    q, k, v = _qkv()
    assert targets.make_hook(target, {})(_stock, NS(causal=False, softmax_scale=0.2), q, k, v) == "stock"
    assert not probe.not_routed


def test_the_diffusion_linear_and_norm_share_srt_adapters_and_their_signatures():
    """The multimodal_gen methods take SRT's leading parameters (the 0.5.15 wheel: docs/design/sglang-diffusion.md)."""
    by_cls = {t.cls.rsplit(".", 1)[1]: t for t in diffusion_targets.TARGETS}
    assert by_cls["UnquantizedLinearMethod"].params.names[:2] == ("layer", "x")
    assert by_cls["RMSNorm"].params.names[:2] == ("x", "residual")
    assert all(t.cls.startswith("sglang.multimodal_gen.runtime.layers.") for t in diffusion_targets.TARGETS)
    assert {s for t in diffusion_targets.TARGETS for s in t.slots} <= set(SLOTS)
