"""A kernel that calls the engine's own op itself (a plain fn: no counted native) is seen from the ops it dispatches."""
import pytest
import torch

from fk_adapters import evidence, op_watch, probe
from fk_adapters.engines import install_common
from fk_adapters.kernel import Kernel
from fk_adapters.tasks import SLOTS

_lib = torch.library.Library("fkt_engine", "DEF")  # an engine's custom ops, as vLLM's _C or sgl_kernel register
_lib.define("rms(Tensor x, Tensor w, float eps) -> Tensor")
_lib.impl("rms", lambda x, w, eps: SLOTS["rms_norm"].reference(x, w, eps), "CPU")
torch.library.register_fake("fkt_engine::rms", lambda x, w, eps: torch.empty_like(x), lib=_lib)
_lib.define("rms_no_fake(Tensor x, Tensor w, float eps) -> Tensor")  # no fake kernel: fails on fake tensors
_lib.impl("rms_no_fake", lambda x, w, eps: SLOTS["rms_norm"].reference(x, w, eps), "CPU")


def native(x, w, eps):
    return torch.ops.fkt_engine.rms(x.contiguous(), w, eps)


def disguised(x, w, eps):
    return torch.ops.fkt_engine.rms(x, w, eps)


def honest(x, w, eps):
    return SLOTS["rms_norm"].reference(x, w, eps)


def now_and_then(x, w, eps):
    return disguised(x, w, eps) if x.shape[0] <= 2 else honest(x, w, eps)


def _evidence(plugin: str) -> dict:
    load = {"pid": 1, "installed": {"rms_norm": {"plugin": plugin, "kernel": "k", "entered": ["RMSNorm"]}},
            "plugins": [{"name": plugin, "kernels": [{"slot": "rms_norm", "kernel_names": []}]}]}
    res = {"probe": [dict(probe.snapshot(), constructed={"rms_norm": 1})], "profile": None}
    return evidence.judge(res, [load], "eager")["slots"]["rms_norm"]


def _op(plugin: str, fn):
    kernel = Kernel(slot="rms_norm", fn=fn, name="k", devices=("cpu",))
    return install_common.wrap_chosen({"rms_norm": (plugin, kernel)}, {"rms_norm": native})["rms_norm"]


@pytest.fixture(autouse=True)
def _clean():
    probe.reset_calls()
    yield
    probe.reset_calls()


def test_the_natives_engine_ops_are_read_on_fake_tensors():
    x, w = torch.randn(4, 8), torch.ones(8)
    assert op_watch.native_ops(native, (x, w, 1e-6)) == {"fkt_engine::rms"}
    # an op without a fake kernel fails there, after it was recorded
    assert op_watch.native_ops(lambda x, w, e: torch.ops.fkt_engine.rms_no_fake(x, w, e), (x, w, 1e-6)) == {
        "fkt_engine::rms_no_fake"}
    assert op_watch.native_ops(honest, (x, w, 1e-6)) == frozenset()  # library (aten) ops are not the engine's
    assert not op_watch.is_engine_op("aten::mm") and not op_watch.is_engine_op("fk_triton::rms_norm")
    assert op_watch.is_engine_op("_C::rms_norm") and op_watch.is_engine_op("sgl_kernel::rmsnorm")


def test_a_plain_function_calling_the_engines_op_is_the_engines_own():
    op, x, w = _op("audit_disguise", disguised), torch.randn(4, 8), torch.ones(8)
    for _ in range(17):
        torch.testing.assert_close(op(x, w, 1e-6), honest(x, w, 1e-6))
    key = "audit_disguise:rms_norm"
    assert probe.ops_watched[key] == 6 == probe.engine_ops_inside[key]  # calls 1-4, 8 and 16
    assert probe.calls[key] == 17 and probe.native_ops[key] == ["fkt_engine::rms"]
    ev = _evidence("audit_disguise")
    assert ev["engine_own"] is True
    assert ev["proof"].startswith("the engine's own op (fkt_engine::rms) ran inside every watched call of the "
                                  "plugin's kernel (6 of 6: the first 4 and each power of two; no speedup is claimed)")


def test_a_kernel_honest_only_while_new_is_seen_later():
    """Behaving for the first calls does not pass: calls 8, 16, 32, ... are watched too."""
    count = [0]

    def honest_at_first(x, w, eps):
        count[0] += 1
        return honest(x, w, eps) if count[0] <= 4 else disguised(x, w, eps)

    op, x, w = _op("audit_later", honest_at_first), torch.randn(4, 8), torch.ones(8)
    for _ in range(16):
        op(x, w, 1e-6)
    ev = _evidence("audit_later")
    assert "engine_own" not in ev
    assert ev["proof"].endswith("2 of its 6 watched calls ran the engine's own op (fkt_engine::rms) inside "
                                "(a fallback)")


def test_an_honest_kernel_is_not_marked_and_a_fallback_is_counted():
    x, w = torch.randn(4, 8), torch.ones(8)
    op = _op("audit_honest", honest)
    op(x, w, 1e-6), op(x, w, 1e-6)
    ev = _evidence("audit_honest")
    assert probe.ops_watched["audit_honest:rms_norm"] == 2 and "engine_own" not in ev
    assert "engine's own op" not in ev["proof"]

    part = _op("audit_sometimes", now_and_then)
    part(x, w, 1e-6), part(x[:2], w, 1e-6), part(x, w, 1e-6)
    ev = _evidence("audit_sometimes")
    assert "engine_own" not in ev
    assert ev["proof"].endswith("1 of its 3 watched calls ran the engine's own op (fkt_engine::rms) inside "
                                "(a fallback)")


def test_a_native_with_no_engine_op_and_a_collective_are_not_watched(monkeypatch):
    x, w = torch.randn(4, 8), torch.ones(8)
    kernel = Kernel(slot="rms_norm", fn=disguised, name="k", devices=("cpu",))
    op = install_common.wrap_chosen({"rms_norm": ("audit_triton_native", kernel)}, {"rms_norm": honest})["rms_norm"]
    op(x, w, 1e-6), op(x, w, 1e-6)
    assert probe.ops_watched["audit_triton_native:rms_norm"] == 0  # nothing to look for: a Triton-only native
    assert probe.native_ops["audit_triton_native:rms_norm"] == []
    assert "all_reduce" in op_watch.UNWATCHED


def test_capture_mode_watches_nothing(monkeypatch):
    monkeypatch.setattr(probe, "capturing", lambda: True)
    op, x, w = _op("audit_capture", disguised), torch.randn(4, 8), torch.ones(8)
    monkeypatch.setattr(probe, "capturing", lambda: False)
    op(x, w, 1e-6)
    assert probe.ops_watched["audit_capture:rms_norm"] == 0


def test_a_natives_own_fallback_cannot_catch_the_stop():
    """The fake run stops at the first engine op even inside a native's ``try/except Exception``."""
    ran_after = []

    def guarded(x, w, eps):
        try:
            return torch.ops.fkt_engine.rms(x, w, eps)
        except Exception:
            ran_after.append(True)
            return honest(x, w, eps)

    assert op_watch.native_ops(guarded, (torch.randn(4, 8), torch.ones(8), 1e-6)) == {"fkt_engine::rms"}
    assert not ran_after
