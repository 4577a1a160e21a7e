"""vLLM's fused_moe replacement method on a stand-in ``UnquantizedFusedMoEMethod`` (no vLLM import): it routes
after the engine's routing with the expert weights as the slot lays them out, and leaves what it cannot serve
stock with why (the real classes: test_gemm_moe_cpu.py)."""
import enum
import types

import pytest
import torch

from fk_adapters import probe
from fk_adapters.engines.vllm import layers, natives


@pytest.fixture(autouse=True)
def _clean_probe():
    counters = (probe.constructed, probe.not_routed, probe.stock_layers)
    for c in counters:
        c.clear()
    yield
    for c in counters:
        c.clear()


class Backend(enum.Enum):
    TRITON = "TRITON"
    CPU = "CPU"
    AITER = "ROCm AITER"


class Method(torch.nn.Module):
    """UnquantizedFusedMoEMethod as the replacement sees it (vLLM 0.32 attributes)."""
    monolithic = False

    def __init__(self, backend=Backend.CPU, activation="silu", use_ep=False):
        super().__init__()
        act = types.SimpleNamespace(value=activation)
        self.moe = types.SimpleNamespace(activation=act, moe_parallel_config=types.SimpleNamespace(use_ep=use_ep))
        self.unquantized_backend = backend
        self.mk_can_overlap_shared_experts = False
        self.moe_kernel = None
        self._forward_method = self.forward_native

    @property
    def is_monolithic(self):
        return self.monolithic

    def forward(self, *args, **kwargs):
        return self._forward_method(*args, **kwargs)

    def forward_native(self, layer, x, topk_weights, topk_ids, shared_experts, shared_experts_input):
        return "stock"

    def process_weights_after_loading(self, layer):  # the CPU backend prepacks in place: another layout
        if self.unquantized_backend is Backend.CPU:
            layer.w13_weight = torch.nn.Parameter(layer.w13_weight.flip(-1), requires_grad=False)
        self.moe_kernel = types.SimpleNamespace(fused_experts=types.SimpleNamespace(isa="vec"))


def moe_layer():
    g = torch.Generator().manual_seed(0)
    return types.SimpleNamespace(w13_weight=torch.randn(4, 16, 8, generator=g),
                                 w2_weight=torch.randn(4, 8, 8, generator=g),
                                 activation=types.SimpleNamespace(value="silu"), apply_router_weight_on_input=False,
                                 expert_map=None)


def built(*args, **kwargs):
    seen = []
    cls = layers.moe_method_class(Method, {"fused_moe": lambda *a: seen.append(a) or "plugin"})
    return cls(*args, **kwargs), seen


def call(method, layer):  # as vLLM's apply calls forward: by keyword
    x, tw, ti = torch.ones(3, 8), torch.full((3, 2), 0.5), torch.zeros(3, 2, dtype=torch.int32)
    return method.forward(layer=layer, x=x, topk_weights=tw, topk_ids=ti, shared_experts=None,
                          shared_experts_input=None)


def test_prepacked_cpu_weights_reach_the_slot_as_the_plain_copies():
    method, seen = built(Backend.CPU)
    layer = moe_layer()
    plain = layer.w13_weight.clone()
    method.process_weights_after_loading(layer)
    assert call(method, layer) == "plugin"
    ((x, w13, w2, tw, ti, act, on_input, b13, b2, alpha, limit, scale),) = seen
    assert torch.equal(w13, plain) and not torch.equal(layer.w13_weight, plain)  # not the engine's packed layout
    assert (act, on_input, b13, b2, alpha, limit, scale) == ("silu", False, None, None, 1.702, 7.0, 1.0)
    packed13, packed2, isa, pad = natives._cpu_state[w13][1]  # the engine's packed weights, for the native
    assert packed13 is layer.w13_weight and packed2 is layer.w2_weight and (isa, pad) == ("vec", 0)
    assert probe.constructed == {"fused_moe": 1} and not probe.not_routed


def test_plain_backend_weights_are_not_copied():
    method, seen = built(Backend.TRITON)
    layer = moe_layer()
    method.process_weights_after_loading(layer)
    call(method, layer)
    assert seen[0][1] is layer.w13_weight and not hasattr(layer, "_fk_plain")


@pytest.mark.parametrize("kwargs, why", [
    ({"backend": Backend.AITER}, "MoE backend AITER keeps the expert weights in its own layout"),
    ({"use_ep": True}, "expert parallel (expert_map)"),
    ({"activation": "relu2_no_mul"}, "activation relu2_no_mul"),
])
def test_an_unsupported_layer_stays_stock_with_why(kwargs, why):
    method, seen = built(**kwargs)
    layer = moe_layer()
    method.process_weights_after_loading(layer)
    assert call(method, layer) == "stock" and not seen and not hasattr(layer, "_fk_plain")
    assert probe.not_routed == {f"fused_moe ({why})": 1} and probe.stock_layers == {"fused_moe": 1}


def test_a_monolithic_backend_stays_stock():
    cls = layers.moe_method_class(type("Mono", (Method,), {"monolithic": True}), {"fused_moe": None})
    cls()
    assert probe.not_routed == {"fused_moe (monolithic CPU MoE backend: routing inside the engine's kernel)": 1}


def test_a_call_with_an_expert_map_runs_stock_counted():
    method, seen = built(Backend.TRITON)
    layer = moe_layer()
    layer.expert_map = torch.arange(4)
    assert call(method, layer) == "stock" and not seen
    assert probe.not_routed == {"fused_moe (call: expert_map (expert parallel))": 1}


class RoutedExperts(torch.nn.Module):
    """vLLM's expert-weights layer as the counter sees it: it builds its own quant method."""

    def __init__(self, method):
        super().__init__()
        self.quant_method = method


class Fp8MoEMethod:
    pass


def test_a_quantized_moe_layer_is_counted_left_stock_with_its_method_and_an_unquantized_one_is_not():
    counter = layers.quantized_moe_counter(RoutedExperts, Method)
    counter(Fp8MoEMethod())
    counter(Fp8MoEMethod())
    counter(Method())  # the unquantized method counts itself (its replacement), not here
    assert probe.stock_layers == {"fused_moe": 2}
    assert probe.not_routed == {"fused_moe (quant_method Fp8MoEMethod)": 2}
    assert not probe.constructed
