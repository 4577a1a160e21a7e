"""SGLang's gemm and fused_moe entries without SGLang: what routes, what stays stock (and why), layer counting."""
from __future__ import annotations

import types

import pytest
import torch

from fk_adapters import probe
from fk_adapters.engines.sglang import targets
from tests.engines.sglang import gemm_moe_fakes as fakes


@pytest.fixture(autouse=True)
def _clean_probe():
    for c in (probe.calls, probe.constructed, probe.not_routed, probe.stock_layers, probe.traced):
        c.clear()
    yield
    targets.Runtime.linear_backend_why = staticmethod(lambda: "")


def _hook(slot, op):
    return targets.make_hook(targets.by_slot()[slot], {slot: op})


def _stock(*args, **kwargs):
    return "stock"


def test_gemm_flattens_leading_dims_and_passes_the_weight_and_bias():
    seen = []

    def op(x, w, b):
        seen.append((x.shape, w, b))
        return x @ w.T + b

    w, b = torch.randn(5, 8), torch.randn(5)
    layer = types.SimpleNamespace(weight=torch.nn.Parameter(w))
    x = torch.randn(2, 3, 8)
    y = _hook("gemm", op)(_stock, object(), layer, x, b)
    assert y.shape == (2, 3, 5) and seen[0][0] == (6, 8) and seen[0][1].data_ptr() == w.data_ptr()
    torch.testing.assert_close(y, x @ w.T + b)


@pytest.mark.parametrize("x, weight, bias, why", [
    (torch.randn(3, 8, dtype=torch.float16), torch.randn(4, 8), None, "x torch.float16, weight torch.float32"),
    (torch.randn(3, 8), torch.randn(4, 8, dtype=torch.float64), None, "x torch.float32, weight torch.float64"),
    (torch.randn(3, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64), None, "x torch.float64"),
    (torch.randn(3, 8), torch.randn(4, 8), torch.randn(4, dtype=torch.float64), "bias dtype differs from x"),
    (torch.randn(0, 8), torch.randn(4, 8), None, "empty input"),
    (torch.randn(3, 8), torch.randn(4, 8).to(torch.int8), None, "weight torch.int8"),
])
def test_gemm_calls_outside_the_slot_go_stock_with_why(x, weight, bias, why):
    layer = types.SimpleNamespace(weight=weight)
    assert _hook("gemm", lambda *a: pytest.fail("routed"))(_stock, object(), layer, x, bias) == "stock"
    assert any(why in k for k in probe.not_routed), probe.not_routed


def test_gemm_a_non_default_backend_goes_stock():
    targets.Runtime.linear_backend_why = staticmethod(lambda: "bf16 GEMM backend cutedsl")
    layer = types.SimpleNamespace(weight=torch.randn(4, 8))
    assert _hook("gemm", lambda *a: pytest.fail("routed"))(_stock, object(), layer, torch.randn(3, 8)) == "stock"
    assert list(probe.not_routed) == ["gemm (call: bf16 GEMM backend cutedsl)"]


def _head_target():
    (t,) = [t for t in targets.TARGETS if t.method == "_compute_lm_head"]
    return t


def _head(method="UnquantizedEmbeddingMethod", **kw):
    cls = type(method, (), {})
    return types.SimpleNamespace(weight=torch.nn.Parameter(torch.randn(10, 8)), quant_method=cls(), **kw)


def test_lm_head_routes_the_plain_head_through_gemm_without_the_bias():
    seen = []
    hook = targets.make_hook(_head_target(), {"gemm": lambda x, w, b: seen.append((x, w, b)) or x @ w.T})
    head, h = _head(), torch.randn(3, 8)
    logits = hook(_stock, types.SimpleNamespace(use_fp32_lm_head=False), h, head, torch.randn(10))
    torch.testing.assert_close(logits, h @ head.weight.T)
    assert seen[0][2] is None  # stock's plain branch ignores embedding_bias too


@pytest.mark.parametrize("head_kw, proc_kw, h, why", [
    ({"method": "Fp8LinearMethod"}, {}, torch.randn(3, 8), "lm_head quant_method Fp8LinearMethod"),
    ({"set_lora": True}, {}, torch.randn(3, 8), "LoRA head"),
    ({}, {"use_fp32_lm_head": True}, torch.randn(3, 8), "fp32 lm_head"),
    ({"use_intel_amx_backend": True}, {}, torch.randn(3, 8), "Intel AMX"),
    ({}, {}, torch.randn(3, 8, dtype=torch.float16), "hidden torch.float16, weight torch.float32"),
    ({}, {}, torch.randn(2, 3, 8), "hidden_states not [T, H]"),
])
def test_lm_head_other_branches_stay_stock(head_kw, proc_kw, h, why):
    method = head_kw.pop("method", "UnquantizedEmbeddingMethod")
    hook = targets.make_hook(_head_target(), {"gemm": lambda *a: pytest.fail("routed")})
    assert hook(_stock, types.SimpleNamespace(**proc_kw), h, _head(method, **head_kw)) == "stock"
    assert any(why in k for k in probe.not_routed), probe.not_routed


def test_linear_layers_are_counted_by_their_method():
    t = targets.by_slot()["gemm"]
    hook = targets.make_init_hook(t, ("gemm",), lambda: pytest.fail("not a layer class"))

    class UnquantizedLinearMethod:
        pass

    class Fp8LinearMethod:
        pass

    def init(layer, method):
        layer.quant_method = method

    for method in (UnquantizedLinearMethod(), UnquantizedLinearMethod(), Fp8LinearMethod()):
        hook(init, types.SimpleNamespace(), method)
    assert probe.constructed["gemm"] == 2 and probe.stock_layers == {"gemm": 1}
    assert any("quant_method Fp8LinearMethod" in k for k in probe.not_routed)


def test_fused_moe_passes_sglangs_routing_and_config_and_returns_a_combine_input():
    seen = []

    def op(*args):
        seen.append(args)
        return torch.zeros_like(args[0])

    b13, b2 = torch.zeros(4, 12), torch.zeros(4, 8)
    method = fakes.moe_method(routed_scaling_factor=2.5, apply_router_weight_on_input=True)
    layer = fakes.moe_layer(b13=b13, b2=b2)
    x = torch.randn(3, 8)
    d = fakes.dispatch(x)
    (out,) = _hook("fused_moe", op)(_stock, method, layer, d)
    (args,) = seen
    assert out.shape == x.shape and args[0] is x and args[1] is layer.w13_weight and args[2] is layer.w2_weight
    assert args[3] is d.topk_output.topk_weights and args[4] is d.topk_output.topk_ids
    assert args[5:] == ("silu", True, b13, b2, 1.702, float("inf"), 2.5)


def test_fused_moe_called_by_keyword_as_run_moe_core_does():
    """FusedMoE.run_moe_core -> quant_method.apply(layer=..., dispatch_output=...) -> self.forward(layer=...,
    dispatch_output=...): the hooked forward_cuda gets its arguments by keyword."""
    seen = []
    layer, d = fakes.moe_layer(), fakes.dispatch(torch.randn(3, 8))
    out = _hook("fused_moe", lambda *a: seen.append(a) or a[0])(_stock, fakes.moe_method(), layer=layer,
                                                                dispatch_output=d)
    assert out[0] is d.hidden_states and seen[0][1] is layer.w13_weight and not probe.not_routed


def test_fused_moe_gpt_oss_swiglu_is_the_swigluoai_activation():
    seen = []
    method = fakes.moe_method(gemm1_alpha=1.702, gemm1_clamp_limit=7.0)
    _hook("fused_moe", lambda *a: seen.append(a) or a[0])(_stock, method, fakes.moe_layer(), fakes.dispatch(
        torch.randn(2, 8)))
    assert seen[0][5] == "swigluoai" and seen[0][9:] == (1.702, 7.0, 1.0)


@pytest.mark.parametrize("method_kw, why", [
    ({"backend": "TRITON_KERNELS"}, "MoE runner backend TRITON_KERNELS"),
    ({"aiter": object()}, "aiter runner"),
    ({"is_gated": False}, "non-gated activation"),
    ({"no_combine": True}, "no_combine"),
    ({"swiglu_limit": 7.0}, "swiglu_limit"),
    ({"activation": "relu2"}, "activation 'relu2'"),
    ({"gemm1_clamp_limit": 7.0}, "clamp limit without alpha"),
    ({"gemm1_alpha": 1.702, "gate_up_interleaved": False}, "alpha with split gate/up rows"),
    ({"num_local_experts": 2}, "expert parallel"),
])
def test_fused_moe_layouts_outside_the_slot_go_stock_with_why(method_kw, why):
    method = fakes.moe_method(**method_kw)
    hook = _hook("fused_moe", lambda *a: pytest.fail("routed"))
    assert hook(_stock, method, fakes.moe_layer(), fakes.dispatch(torch.randn(3, 8))) == "stock"
    assert any(why in k for k in probe.not_routed), probe.not_routed


@pytest.mark.parametrize("dispatch_kw, why", [
    ({"topk": types.SimpleNamespace(topk_weights=None, topk_ids=None)}, "top-k output SimpleNamespace"),
    ({"scale": torch.ones(3)}, "hidden_states_scale"),
])
def test_fused_moe_other_dispatch_formats_go_stock(dispatch_kw, why):
    hook = _hook("fused_moe", lambda *a: pytest.fail("routed"))
    assert hook(_stock, fakes.moe_method(), fakes.moe_layer(), fakes.dispatch(torch.randn(3, 8), **dispatch_kw)) \
        == "stock"
    assert any(why in k for k in probe.not_routed), probe.not_routed


def test_moe_layers_are_counted_by_method_and_runner():
    t = targets.by_slot()["fused_moe"]
    hook = targets.make_init_hook(t, ("fused_moe",), lambda: pytest.fail("not a layer class"))

    class UnquantizedFusedMoEMethod(types.SimpleNamespace):
        pass

    class Fp8MoEMethod:
        pass

    def init(layer, method):
        layer.quant_method = method

    ok = fakes.moe_method()
    kernels = fakes.moe_method(backend="TRITON_KERNELS")
    for method in (UnquantizedFusedMoEMethod(**vars(ok)), UnquantizedFusedMoEMethod(**vars(kernels)),
                   Fp8MoEMethod()):
        hook(init, types.SimpleNamespace(), method)
    assert probe.constructed["fused_moe"] == 1 and probe.stock_layers == {"fused_moe": 2}
    assert any("TRITON_KERNELS" in k for k in probe.not_routed)
    assert any("quant_method Fp8MoEMethod" in k for k in probe.not_routed)
