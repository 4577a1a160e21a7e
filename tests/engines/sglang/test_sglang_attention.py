"""SGLang's paged_attention entry without SGLang: fa3's forward_extend / forward_decode hooks, what routes (after the
engine's own cache write), what stays stock and why, and layer counting at RadixAttention."""
from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import torch

from fk_adapters import probe
from fk_adapters.engines import loading
from fk_adapters.engines.sglang import targets
from fk_adapters.tasks import SLOTS
from tests.engines.sglang import attention_fakes as fakes


@pytest.fixture(autouse=True)
def _clean_probe():
    for c in (probe.calls, probe.constructed, probe.not_routed, probe.stock_layers, probe.traced):
        c.clear()
    yield
    targets.Runtime.attention_backend_why = staticmethod(lambda: "")


HQ, HKV, D, PAGES = 4, 2, 32, 64


def _layer(**kw):
    return fakes.layer(HQ, HKV, D, **kw)


def _backend(**kw):
    gen = torch.Generator().manual_seed(0)
    pool = fakes.Pool(*(torch.randn(PAGES, HKV, D, generator=gen) for _ in range(2)))
    return fakes.backend(pool, torch.tensor([[5, 9, 2, 0], [7, 3, 0, 0]], dtype=torch.int32),
                         torch.tensor([3, 2], dtype=torch.int32), torch.tensor([0, 2, 3], dtype=torch.int32), 2, **kw)


def _batch(mode="EXTEND", **kw):
    return fakes.batch(mode, **{"out_cache_loc": torch.tensor([9, 2, 3]), **kw})


def _hook(method, op):
    target = next(t for t in targets.TARGETS if t.method == method)
    return targets.make_hook(target, {"paged_attention": op})


def _stock(*args, **kwargs):
    return "stock"


def test_extend_writes_the_new_keys_first_then_runs_the_slot_over_the_paged_cache():
    seen = []

    def op(*args):
        seen.append(args)
        SLOTS["paged_attention"].reference(*args)

    backend, layer = _backend(), _layer()
    q, k, v = torch.randn(3, HQ * D), torch.randn(3, HKV * D), torch.randn(3, HKV * D)
    out = _hook("forward_extend", op)(_stock, backend, q, k, v, layer, _batch())
    assert backend.token_to_kv_pool.writes and torch.equal(backend.token_to_kv_pool.k[2], k.view(3, HKV, D)[1])
    (qv, kc, vc, table, lens, qsl, max_q, scale, window, softcap, o), = seen
    assert qv.shape == (3, HQ, D) and kc.shape == (PAGES, 1, HKV, D) and vc.shape == (PAGES, 1, HKV, D)
    assert (table is backend.forward_metadata.page_table, max_q, window, softcap) == (True, 2, -1, 0.0)
    assert out.shape == (3, HQ * D) and out.data_ptr() == o.data_ptr()
    # request 0: its 2 queries at positions 1 and 2 over keys in slots 5, 9, 2 (the last two written just now)
    keys = backend.token_to_kv_pool.k[[5, 9, 2]].repeat_interleave(HQ // HKV, 1)
    vals = backend.token_to_kv_pool.v[[5, 9, 2]].repeat_interleave(HQ // HKV, 1)
    s = torch.einsum("hd,khd->hk", qv[1], keys) * layer.scaling
    assert torch.allclose(out.view(3, HQ, D)[1], torch.einsum("hk,khd->hd", s.softmax(-1), vals), atol=1e-5)


def test_decode_writes_into_the_engines_output_buffer_when_it_gives_one():
    buf = torch.zeros(2, HQ * D)
    backend = _backend()
    backend.forward_metadata.cu_seqlens_q = torch.tensor([0, 1, 2], dtype=torch.int32)
    backend.forward_metadata.max_seq_len_q = 1
    q, k, v = torch.randn(2, HQ * D), torch.randn(2, HKV * D), torch.randn(2, HKV * D)
    out = _hook("forward_decode", SLOTS["paged_attention"].reference)(
        _stock, backend, q, k, v, _layer(sliding_window_size=7, logit_cap=30.0),
        _batch("DECODE", out_cache_loc=torch.tensor([2, 3]), _attn_output=buf))
    assert out.data_ptr() == buf.data_ptr() and bool(buf.abs().sum() > 0)


@pytest.mark.parametrize("method, batch, backend_kw, layer_kw, why", [
    ("forward_extend", {"forward_mode": NS(name="TARGET_VERIFY")}, {}, {}, "forward mode TARGET_VERIFY"),
    ("forward_decode", {"forward_mode": NS(name="EXTEND")}, {}, {}, "forward mode EXTEND"),
    ("forward_extend", {}, {"use_mla": True}, {}, "MLA"),
    ("forward_extend", {}, {"kv_cache_dtype_str": "fp8_e4m3"}, {}, "KV cache dtype fp8_e4m3"),
    ("forward_extend", {}, {"attn_cp_size": 2}, {}, "context parallel"),
    ("forward_extend", {}, {"fa_skip_kv_cache": True}, {}, "embedding mode (no KV cache)"),
    ("forward_extend", {}, {"use_sliding_window_kv_pool": True}, {"sliding_window_size": 7},
     "SWA layer on the SWA KV pool"),
    ("forward_extend", {}, {}, {"is_cross_attention": True}, "cross attention"),
    ("forward_extend", {}, {}, {"attn_type": NS(value="encoder_only")}, "encoder_only attention"),
    ("forward_extend", {}, {}, {"use_irope": True}, "chunked local attention (iRoPE)"),
    ("forward_decode", {"forward_mode": NS(name="DECODE"), "spec_info": object()}, {}, {}, "speculative decoding"),
])
def test_calls_outside_the_slot_stay_stock_with_why(method, batch, backend_kw, layer_kw, why):
    calls = []
    out = _hook(method, lambda *a: calls.append(a))(_stock, _backend(**backend_kw), torch.randn(3, HQ * D),
                                                     torch.randn(3, HKV * D), torch.randn(3, HKV * D),
                                                     _layer(**layer_kw), _batch(**batch))
    assert out == "stock" and not calls and probe.not_routed == {f"paged_attention (call: {why})": 1}


def test_sinks_stay_stock():
    out = _hook("forward_extend", lambda *a: None)(_stock, _backend(), torch.randn(3, HQ * D), None, None, _layer(),
                                                   _batch(), sinks=torch.zeros(HQ))
    assert out == "stock" and probe.not_routed == {"paged_attention (call: sinks)": 1}


def test_layers_are_counted_once_at_radix_attention_with_the_backend_and_layer_reasons():
    extend, decode = (t for t in targets.TARGETS if "paged_attention" in t.slots)
    assert (extend.init_path, extend.counts_layers, decode.counts_layers) == (
        "sglang.srt.layers.radix_attention.RadixAttention.__init__", True, False)
    assert targets.attention_built(_layer()) == ""
    assert targets.attention_built(_layer(quant_method=object())) == "quantized attention"
    targets.Runtime.attention_backend_why = staticmethod(lambda: "attention backend flashinfer (fk hooks fa3)")
    assert targets.attention_built(_layer()) == "attention backend flashinfer (fk hooks fa3)"


def test_an_engine_own_kernel_runs_the_backends_own_forward_counted(monkeypatch):
    monkeypatch.setitem(loading.ENGINE_OWN, "paged_attention", "passthrough:paged_attention")
    monkeypatch.setattr(probe, "native_path", probe.native_path.__class__())
    calls = []
    out = _hook("forward_extend", lambda *a: calls.append(a))(_stock, _backend(), torch.randn(3, HQ * D),
                                                               torch.randn(3, HKV * D), torch.randn(3, HKV * D),
                                                               _layer(), _batch())
    assert out == "stock" and not calls and not probe.not_routed
    assert probe.native_path == {"passthrough:paged_attention": 1}
