"""What a plugin hands over for one slot: a kernel and the claims it makes about itself."""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fk_adapters.engines import NAMES as ENGINES

DTYPES = ("float32", "float16", "bfloat16")
DEVICES = ("cuda", "cpu")


class KernelSpecError(ValueError):
    """A plugin declared a kernel that breaks the contract."""


@dataclass(frozen=True)
class Kernel:
    """One kernel for one catalog slot.

    Give ``fn`` (called with the slot's interface, see ``fk slots``), or ``factory``:
    a callable that receives the engine's own implementation of the slot, in the
    slot's interface, and returns the kernel (a passthrough returns it unchanged).
    The flags are claims the adapters act on: a kernel that is not ``compile_safe``
    is refused in compiled mode, one that is not ``cuda_graph_safe`` under CUDA graphs.
    ``kernel_names`` are the exact names (a Triton function's name, or a CUDA kernel's, optionally
    ``ns::``-qualified) of device kernels the profiler will show when this kernel runs: the proof that it
    ran under CUDA graphs. Each must be defined by the plugin's own distribution, not launched by the
    stock engine, and declared for this slot only (``fk_adapters.kernel_names``), or the slot is "not proven".
    ``kernel_library``: where the kernels are a published library's (a distribution the plugin's own requires,
    e.g. ``"vllm"``), its name: the names must then be defined by that distribution instead.
    """

    slot: str
    fn: Callable | None = None
    factory: Callable[[Callable], Callable] | None = None
    name: str = ""
    engines: tuple[str, ...] = ENGINES
    dtypes: tuple[str, ...] = DTYPES
    devices: tuple[str, ...] = ("cuda",)
    cuda_graph_safe: bool = False
    compile_safe: bool = False
    kernel_names: tuple[str, ...] = ()
    kernel_library: str = ""
    description: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    def validate(self, known_slots: Mapping) -> None:
        """Raise KernelSpecError if this declaration cannot be honoured (``known_slots``: {name: Slot}), among others
        when its callable cannot be called as the engine calls it: ``fn`` with the slot's arguments, positionally,
        ``factory`` with the engine's own kernel."""
        if self.slot not in known_slots:
            raise KernelSpecError(f"unknown slot {self.slot!r} (known: {', '.join(sorted(known_slots))})")
        if (self.fn is None) == (self.factory is None):
            raise KernelSpecError(f"kernel for {self.slot!r}: give exactly one of fn= or factory=")
        for what, values, allowed in (("engines", self.engines, ENGINES), ("dtypes", self.dtypes, DTYPES),
                                      ("devices", self.devices, DEVICES)):
            if isinstance(values, str) or not values:
                raise KernelSpecError(f"kernel for {self.slot!r}: {what} must be a non-empty tuple")
            bad = [v for v in values if v not in allowed]
            if bad:
                raise KernelSpecError(f"kernel for {self.slot!r}: unknown {what} {bad} (allowed: {list(allowed)})")
        mismatch = self.signature_mismatch(known_slots[self.slot])
        if mismatch:
            raise KernelSpecError(f"kernel for {self.slot!r}: {mismatch}")

    def signature_mismatch(self, slot) -> str:
        """Why the callable cannot take what the engine passes for ``slot`` ('' if it can, or cannot be read)."""
        if self.fn is not None:
            why = _unbindable(self.fn, len(slot.param_names()))
            what = f"fn {self.label} cannot be called as {slot.signature.split(' ->')[0]}"
        else:
            why = _unbindable(self.factory, 1)
            what = f"factory {self.label} cannot take the engine's own kernel (one argument)"
        return f"{what} ({why})" if why else ""

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        target = self.fn or self.factory
        return getattr(target, "__name__", type(target).__name__)

    def describe(self) -> dict:
        return {"slot": self.slot, "name": self.label, "engines": list(self.engines), "dtypes": list(self.dtypes),
                "devices": list(self.devices), "cuda_graph_safe": self.cuda_graph_safe,
                "compile_safe": self.compile_safe, "kernel_names": list(self.kernel_names),
                **({"kernel_library": self.kernel_library} if self.kernel_library else {}),
                "kind": "factory" if self.factory else "fn"}


def _unbindable(target, n_args: int) -> str:
    """Why ``target`` cannot be called with ``n_args`` positional arguments ('' if it can, or cannot be read)."""
    if not callable(target):
        return f"{type(target).__name__} is not callable"
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin or an extension's function: nothing to read
        return ""
    try:
        sig.bind(*range(n_args))
    except TypeError as exc:
        return f"{sig}: {exc}"
    return ""
