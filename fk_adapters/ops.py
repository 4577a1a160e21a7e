"""Wrap a plugin kernel as an opaque torch custom op, so engines can compile around it.

The op's body is the only place a kernel call is counted: it runs on every eager call,
and only at capture time under CUDA graphs (where the profiler is the evidence). Its
fake implementation gives torch.compile the result's shape without running the kernel.
In capture mode (``FK_CAPTURE=1`` when the op is wrapped) it also counts each call's signature, samples
its inputs' value statistics, and opens a profiler range around the call (``op_families.slot_us``).
"""
from __future__ import annotations

import re

from fk_adapters import op_families, op_watch, probe

_registered: dict[str, object] = {}
_libraries: list = []  # a torch Library deregisters its ops when collected: keep them alive
_DTYPE_NAMES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}


def op_key(plugin: str, slot: str) -> str:
    return f"{plugin}:{slot}"


def namespace(plugin: str) -> str:
    return "fk_" + re.sub(r"\W", "_", plugin)


def wrap(plugin: str, slot, fn, dtypes: tuple[str, ...], native=None):
    """Register ``fn`` as torch op ``fk_<plugin>::<slot>`` and return the op (idempotent per process). ``native``:
    the engine's own kernel for the slot, whose ops the first calls are watched for (``op_watch``)."""
    import torch

    qualname = f"{namespace(plugin)}::{slot.name}"
    if qualname in _registered:
        return _registered[qualname]
    key = op_key(plugin, slot.name)
    allowed = set(dtypes)
    record = _recorder(slot) if probe.capturing() else None
    scope = op_families.SLOT_SCOPE + slot.name
    watched = native is not None and slot.name not in op_watch.UNWATCHED and not probe.capturing()
    watch = op_watch.Watch(key, native) if watched else None

    def body(*args):
        dtype = _DTYPE_NAMES.get(str(args[slot.dtype_arg].dtype), str(args[slot.dtype_arg].dtype))
        if dtype not in allowed:
            raise TypeError(f"fk kernel {key} does not support {dtype} (declared: {sorted(allowed)})")
        entered = probe.native_entered[key]
        run = (lambda *a: watch.call(fn, a)) if watch is not None and watch.wants(args) else fn
        if not record:
            out = run(*args)
        else:
            record(args)
            with torch.profiler.record_function(scope):  # a profiled capture: the device time inside slot calls
                out = run(*args)
        if probe.native_entered[key] != entered:  # the engine's own op ran inside this call
            probe.native_inside[key] += 1
        probe.hit(key)  # counted once the kernel returned: a call that raised ran nothing of the plugin's
        return out

    lib = torch.library.Library(namespace(plugin), "FRAGMENT")
    lib.define(slot.name + slot.schema)
    lib.impl(slot.name, body, "CompositeExplicitAutograd")

    def fake(*args):
        probe.traced[key] += 1
        return slot.fake(*args) if slot.fake else None

    torch.library.register_fake(qualname, fake, lib=lib)
    op = getattr(getattr(torch.ops, namespace(plugin)), slot.name)
    _registered[qualname] = op
    _libraries.append(lib)
    return op


def _recorder(slot):
    """Counts each call's signature into ``probe.signatures[slot.name]`` and samples its inputs' value
    statistics into ``probe.value_stats[slot.name]`` (``fk_adapters.check.value_stats``)."""
    from fk_adapters import call_signature
    from fk_adapters.check import value_stats

    names = slot.param_names()

    def record(args) -> None:
        key = call_signature.key(call_signature.describe(args))
        counts = probe.signatures[slot.name]
        counts[key] += 1
        value_stats.record(probe.value_stats[slot.name], key, names, args, counts[key], probe.run_dir())

    return record
