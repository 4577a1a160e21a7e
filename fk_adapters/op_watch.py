"""Whether a plugin's kernel runs the engine's own op inside it, seen from the ops it dispatches.

A factory kernel is handed a counted native (``loading.kernel_callable``), but a kernel given as a plain ``fn`` can
call the engine's op itself (``torch.ops._C.rms_norm``, ``sgl_kernel``'s ops) and return its result as its own. The
first ``WATCHED`` eager calls of each op, then each call whose number is a power of two (so that a kernel cannot
behave only while it is new), run under a dispatch mode that records the torch ops dispatched at the top level of
the kernel. The native's own engine op is read once, from a run of the native on fake tensors that stops at its
first engine op (no device work, no writes, and no engine op ever runs on the side). A watched call that dispatched
that op ran the engine's op inside it. torch's own ops (``aten``, ``prims``, ...) and fk's are not the engine's.
Natives that reach no engine op that way (Triton launches alone, or an op that cannot run on fake tensors first)
give nothing to look for (there, a device profile's kernel names are the proof); a collective is never run on the
side."""
from __future__ import annotations

from fk_adapters import probe

WATCHED = 4  # the first eager calls watched per op and process (then calls 8, 16, 32, ...)
UNWATCHED = ("all_reduce",)  # a collective: even on fake tensors its native could reach the process group
_NOT_ENGINE = ("aten::", "prim::", "prims::", "profiler::", "c10d::", "_c10d_functional::", "fk_")  # torch's and fk's


def is_engine_op(name: str) -> bool:
    return not name.startswith(_NOT_ENGINE)


class _FirstEngineOp(BaseException):
    """Raised by the recorder at a native's first engine op: no engine op ever runs on the side (a BaseException, so
    that a native's own ``except Exception`` fallback cannot catch it and go on running on fake tensors)."""


def _recorder(seen: set, stop_at_engine_op: bool = False):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            schema = getattr(func, "_schema", None)  # an OpOverload; a higher-order op has none
            name = schema.name if schema is not None else str(getattr(func, "name", func))
            seen.add(name)
            if stop_at_engine_op and is_engine_op(name):
                raise _FirstEngineOp(name)
            return func(*args, **(kwargs or {}))

    return Recorder()


def native_ops(native, args) -> frozenset[str]:
    """The first engine op ``native`` dispatches at its top level, from a run on fake copies of ``args`` that stops
    there: only torch's own ops run before it (on fake tensors, with no fallback to real kernels); empty where none
    is reached (a Triton launch, or an op that cannot run on fake tensors, comes first)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        mode = FakeTensorMode(allow_fallback_kernels=False)
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        with mode, _recorder(set(), stop_at_engine_op=True):
            native(*fake)
    except _FirstEngineOp as found:
        return frozenset(found.args)
    except Exception:  # noqa: BLE001 (a Triton launch, an op without a fake kernel: no engine op to look for)
        pass
    return frozenset()


def dispatched(fn, args) -> set[str]:
    """The engine ops ``fn(*args)`` dispatches at its top level."""
    seen: set[str] = set()
    with _recorder(seen):
        fn(*args)
    return {n for n in seen if is_engine_op(n)}


def runs_native(fn, native, args, clone) -> list[str]:
    """[the native's engine op] where ``fn`` dispatched it too on ``args`` (each run on ``clone(args)``), else []: one
    call on the side, as ``fk check`` makes per shape."""
    looks_for = native_ops(native, clone(args))
    return sorted(looks_for) if looks_for and looks_for <= dispatched(fn, clone(args)) else []


class Watch:
    """One op's watch: ``call(fn, args)`` runs ``fn`` watched while ``wants(args)``."""

    def __init__(self, key: str, native):
        self.key, self.native, self.looks_for = key, native, None

    def wants(self, args) -> bool:
        n = probe.calls[self.key] + 1  # this call's number in this process
        if self.looks_for == frozenset() or (n > WATCHED and n & (n - 1)):
            return False
        return not _capturing(args)

    def call(self, fn, args):
        if self.looks_for is None:
            self.looks_for = native_ops(self.native, args)
            probe.native_ops[self.key] = sorted(self.looks_for)
            if not self.looks_for:
                return fn(*args)
        seen: set[str] = set()
        with _recorder(seen):
            out = fn(*args)
        probe.ops_watched[self.key] += 1
        if self.looks_for <= seen:
            probe.engine_ops_inside[self.key] += 1
        return out


def _capturing(args) -> bool:
    """A CUDA graph is being captured: work on the side would be captured into it."""
    import torch

    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    return cuda and torch.cuda.is_current_stream_capturing()
