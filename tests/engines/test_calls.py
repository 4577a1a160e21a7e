"""The engine drift guard shared by the adapters: which calls an adapter knows, in-tree signature drift, and
counting a call left stock in eager mode and under torch.compile."""
import pytest
import torch

from fk_adapters import probe
from fk_adapters.engines import calls


@pytest.fixture(autouse=True)
def _clean_probe():
    probe.not_routed.clear()
    yield
    probe.not_routed.clear()


def rms(self, x, residual=None):
    return x


RMS = calls.Params.of(rms, skip=1)


def test_params_are_the_routed_functions_own():
    assert RMS == calls.Params(("x", "residual"), 1)


@pytest.mark.parametrize("args, kwargs, why", [
    ((1,), {}, ""),
    ((1, 2), {}, ""),
    ((), {"x": 1, "residual": 2}, ""),
    ((1,), {"quant_linear": object()}, "unknown argument 'quant_linear'"),
    ((1,), {"b": 0, "a": 0}, "unknown arguments 'a', 'b'"),
    ((1, 2, 3), {}, "3 positional arguments, knows 2 (x, residual)"),
    ((1,), {"x": 1}, "argument given twice: 'x'"),
    ((), {"residual": 2}, "missing argument 'x'"),
])
def test_unknown_names_what_the_adapter_does_not_know(args, kwargs, why):
    assert calls.unknown(RMS, args, kwargs) == why


class InTree:
    def forward_native(self, x, residual=None):
        pass

    @staticmethod
    def forward_cpu(x, residual=None, quant_linear=None):
        pass

    def forward_cuda(self, *args, **kwargs):  # a dispatcher: says nothing about the interface
        pass


def test_drift_notes_in_tree_parameters_the_adapter_does_not_know():
    assert calls.drift(RMS, InTree, ("forward_native", "forward_cuda", "forward_xpu")) == ("", "")
    assert calls.drift(RMS, InTree, ("forward_native", "forward_cpu")) == (
        "", "in-tree InTree also takes 'quant_linear': calls passing it stay stock")


def test_drift_breaks_where_calls_would_be_read_wrongly():
    class Reordered:
        def forward_native(self, x, quant_linear=None, residual=None):
            pass

    class Required:
        def forward_native(self, x, residual=None, *, scale):
            pass

    assert calls.drift(RMS, Reordered, ("forward_native",))[0] == (
        "in-tree Reordered.forward_native(x, quant_linear, residual) is not the (x, residual) fk was written for")
    assert calls.drift(RMS, Required, ("forward_native",))[0] == (
        "in-tree Required.forward_native requires 'scale', unknown to fk")


def test_left_stock_counts_each_eager_call():
    for _ in range(3):
        calls.left_stock("rms_norm", "unknown argument 'quant_linear'")
    assert probe.not_routed == {"rms_norm (call: unknown argument 'quant_linear')": 3}


def test_left_stock_under_torch_compile_fullgraph_counts_once_per_trace():
    """Dynamo traces the check and the count (no graph break: fullgraph); the count is a trace-time record."""

    class Layer(torch.nn.Module):
        def forward(self, *args, **kwargs):
            why = calls.unknown(RMS, args, kwargs)
            if why:
                calls.left_stock("rms_norm", why)
                return args[0] * 2 + kwargs.get("quant_linear", 0)
            return args[0]

    compiled = torch.compile(Layer(), fullgraph=True, backend="aot_eager")
    x = torch.ones(4)
    for _ in range(3):
        assert torch.equal(compiled(x, quant_linear=torch.full((4,), 5.0)), torch.full((4,), 7.0))
    assert torch.equal(compiled(x), x)
    assert probe.not_routed == {"rms_norm (call, counted once per compiled trace: unknown argument 'quant_linear')": 1}


def test_a_call_left_stock_reaches_the_results_notes():
    from fk_adapters.runner import ab

    calls.left_stock("rms_norm", "unknown argument 'quant_linear'")
    cand = {"probe": [probe.snapshot()]}
    assert ab._notes({"slots": {"rms_norm": {"status": "exercised"}}}, cand) == [
        "left stock: rms_norm (call: unknown argument 'quant_linear') x1"]
