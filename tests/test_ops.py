"""Plugin kernels as torch custom ops: counted, dtype-checked, traceable by torch.compile."""
import pytest
import torch

from fk_adapters import ops, probe
from fk_adapters.tasks import SLOTS


def test_wrapped_kernel_counts_calls_and_checks_dtype():
    slot = SLOTS["rms_norm"]
    op = ops.wrap("unit_test_a", slot, slot.reference, ("float32",))
    x, w = torch.randn(3, 16), torch.ones(16)
    probe.reset_calls()
    torch.testing.assert_close(op(x, w, 1e-6), slot.reference(x, w, 1e-6))
    op(x, w, 1e-6)
    assert probe.calls[ops.op_key("unit_test_a", "rms_norm")] == 2
    with pytest.raises(TypeError, match="does not support float16"):
        op(x.half(), w.half(), 1e-6)
    assert ops.wrap("unit_test_a", slot, slot.reference, ("float32",)) is op
    assert probe.calls[ops.op_key("unit_test_a", "rms_norm")] == 2  # a refused call ran nothing of the plugin's


def test_a_kernel_that_raised_is_not_counted_as_a_call():
    def broken(x, w, eps):
        raise ZeroDivisionError("kernel failed")

    op = ops.wrap("unit_test_raise", SLOTS["rms_norm"], broken, ("float32",))
    probe.reset_calls()
    with pytest.raises(ZeroDivisionError):
        op(torch.randn(2, 8), torch.ones(8), 1e-6)
    assert probe.calls[ops.op_key("unit_test_raise", "rms_norm")] == 0


def test_in_place_slot_mutates_through_the_op():
    slot = SLOTS["fused_add_rms_norm"]
    op = ops.wrap("unit_test_b", slot, slot.reference, ("float32",))
    x, r, w = torch.randn(4, 8), torch.randn(4, 8), torch.rand(8)
    ex, er = x.clone(), r.clone()
    slot.reference(ex, er, w, 1e-6)
    assert op(x, r, w, 1e-6) is None
    torch.testing.assert_close(x, ex)
    torch.testing.assert_close(r, er)


def test_ops_compile_with_fake_impls():
    """torch.compile traces the op through its fake impl (what vLLM's compiled mode relies on)."""
    norm = ops.wrap("unit_test_c", SLOTS["rms_norm"], SLOTS["rms_norm"].reference, ("float32",))
    act = ops.wrap("unit_test_c", SLOTS["silu_and_mul"], SLOTS["silu_and_mul"].reference, ("float32",))
    rope = ops.wrap("unit_test_c", SLOTS["rotary_embedding"], SLOTS["rotary_embedding"].reference, ("float32",))

    def block(pos, x, w, q, k, cache):
        rope(pos, q, k, 64, cache, True)
        return act(norm(x, w, 1e-6)) * 2 + q.sum() + k.sum()

    args = SLOTS["rotary_embedding"].make_inputs(SLOTS["rotary_embedding"].cases[0], torch.float32, "cpu",
                                                  torch.Generator().manual_seed(0))
    pos, q, k, head_size, cache, _ = args
    assert head_size == 64
    x, w = torch.randn(5, 32), torch.rand(32)
    expected = block(pos, x, w, q.clone(), k.clone(), cache)
    probe.traced.clear()
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    got = compiled(pos, x, w, q.clone(), k.clone(), cache)
    assert probe.traced[ops.op_key("unit_test_c", "rms_norm")] >= 1
    assert probe.traced[ops.op_key("unit_test_c", "rotary_embedding")] >= 1
    torch.testing.assert_close(got, expected)


def test_a_capture_marks_each_slot_call_with_a_profiler_range(monkeypatch):
    from fk_adapters import op_families

    monkeypatch.setenv(probe.ENV_CAPTURE, "1")
    slot = SLOTS["silu_and_mul"]
    op = ops.wrap("range_test", slot, slot.reference, ("float32",))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        op(torch.randn(4, 32))
    names = [e.name for e in prof.events()]
    assert op_families.SLOT_SCOPE + "silu_and_mul" in names
