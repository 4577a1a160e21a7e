"""vLLM 0.26's own CUDA kernels in the slot interface (what the passthrough plugin and fk-vllm-moe route to) against
the slots' references, bf16 on every catalog case. Marked ``gpu``; the evidence is under ``reports/gpu/``."""
import importlib.util

import pytest
import torch

from fk_adapters.tasks import SLOTS

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

BF16_TOL = {"atol": 1.6e-2, "rtol": 1.6e-2}
CASES = [(name, i) for name in ("gemm", "fused_moe", "paged_attention", "gated_rms_norm")
         for i, c in enumerate(SLOTS[name].cases)
         if name != "paged_attention" or (c["bs"] % 16 == 0 and c.get("layout") != "k_transposed")]  # FA's caches


@pytest.mark.parametrize("name,index", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_vllm_natives_match_the_slot_reference(name, index):
    import vllm._custom_ops  # noqa: F401

    from fk_adapters.engines.vllm.natives import NATIVES

    slot = SLOTS[name]
    args = slot.make_inputs(slot.cases[index], torch.bfloat16, "cuda", torch.Generator().manual_seed(index))
    mine = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    got = NATIVES[name](*mine)
    if slot.in_place:  # paged_attention: into out
        (got,) = (mine[i] for i in slot.mutated_positions())
    (want,) = slot.run_reference(args)
    torch.testing.assert_close(got.float(), want.float(), **BF16_TOL)


RECURRENT = [(name, i) for name in ("gated_delta_rule", "gated_delta_rule_decode", "ssd_chunk_scan", "ssm_state_update")
             for i in range(len(SLOTS[name].cases))]


@pytest.mark.parametrize("name,index", RECURRENT, ids=[f"{n}-{i}" for n, i in RECURRENT])
def test_vllm_recurrent_natives_match_the_slot_reference(name, index):
    """FLA's gated delta rule kernels (KDA's for a decay per key) and Mamba2's SSD scan / state update: out and the
    pool, skipped rows untouched."""
    import vllm._custom_ops  # noqa: F401

    from fk_adapters.engines.vllm.natives import NATIVES

    slot = SLOTS[name]
    args = slot.make_inputs(slot.cases[index], torch.bfloat16, "cuda", torch.Generator().manual_seed(index))
    mine = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    NATIVES[name](*mine)
    for got, want in zip((mine[i] for i in slot.mutated_positions()), slot.run_reference(args)):
        torch.testing.assert_close(got.float(), want.float(), **BF16_TOL)


def test_the_gdn_passthrough_feeds_a_decode_step_as_stocks_packed_kernel_does():
    """A step of decodes alone: stock runs one packed kernel (gating in-kernel, beta rounded to b's dtype); fk's
    adapter runs the engine's prep kernel, then the slot. With vLLM's own decode kernel in the slot (passthrough), out
    and the pool must match stock's all but bit for bit (session 41's fk46-qwen3-next passthrough, before beta was
    rounded so: 0 of 32 greedy streams identical to stock's, against 30 in its A/A)."""
    from types import SimpleNamespace

    from vllm.third_party.flash_linear_attention.ops import (
        fused_post_conv_prep,
        fused_recurrent_gated_delta_rule_packed_decode,
    )

    from fk_adapters.engines.vllm.linear_attention import gdn_prep
    from fk_adapters.engines.vllm.natives import NATIVES

    gen, n, h, hv, d = torch.Generator().manual_seed(0), 8, 2, 4, 128
    rand = lambda *shape, dtype=torch.bfloat16: torch.randn(*shape, generator=gen).to("cuda", dtype)  # noqa: E731
    layer = SimpleNamespace(A_log=rand(hv, dtype=torch.float32), dt_bias=rand(hv, dtype=torch.float32),
                            num_k_heads=h, tp_size=1, head_k_dim=d, head_v_dim=d)
    x, a, b, pool = rand(n, (2 * h + hv) * d), rand(n, hv), rand(n, hv), rand(n + 2, hv, d, d) * 0.1
    idx = torch.arange(1, n + 1, dtype=torch.int32, device="cuda")
    stock_pool, stock_out = pool.clone(), torch.zeros(n, 1, hv, d, dtype=torch.bfloat16, device="cuda")
    fused_recurrent_gated_delta_rule_packed_decode(mixed_qkv=x, a=a, b=b, A_log=layer.A_log, dt_bias=layer.dt_bias,
                                                   scale=d ** -0.5, initial_state=stock_pool, out=stock_out,
                                                   ssm_state_indices=idx, use_qk_l2norm_in_kernel=True)
    dec, _ = gdn_prep(fused_post_conv_prep, layer, x, a, b, n, packed_decode=True)
    fk_pool, fk_out = pool.clone(), torch.zeros(n, hv, d, dtype=torch.bfloat16, device="cuda")
    NATIVES["gated_delta_rule_decode"](*dec, fk_pool, idx, d ** -0.5, True, fk_out)
    for got, want in ((fk_out, stock_out[:, 0]), (fk_pool, stock_pool)):
        assert (got == want).float().mean() >= 0.99
        torch.testing.assert_close(got.float(), want.float(), **BF16_TOL)
