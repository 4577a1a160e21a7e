"""The all_reduce slot in SGLang 0.5.15: ``GroupCoordinator.all_reduce`` of its tensor-parallel groups.

An AROUND hook on ``sglang.srt.distributed.parallel_state.GroupCoordinator.all_reduce(input_)`` (what
``tensor_model_parallel_all_reduce`` and the attention / MoE groups call) routes a tensor-parallel group of 2+
ranks ("tp", "attention_tp", "moe_tp") to the slot; other groups keep SGLang's own, counted. The group's native is
SGLang's own all_reduce (its CPU, pynccl and in-place paths write their input: the native reduces a copy). An
engine-own kernel (passthrough) leaves a routed call on SGLang's own all_reduce, with no copy, counted.
Pure Python: nothing here imports sglang.
"""
from __future__ import annotations

import threading

from fk_adapters import groups
from fk_adapters.engines.sglang.base import Stock, Target, own_path

SLOT = "all_reduce"
_in_native = threading.local()  # set while a group's native runs SGLang's own all_reduce through the hooked method


def group_built(group) -> str | None:
    """Why a built group keeps SGLang's all-reduce ("": it routes, registered with fk; None: one rank, not counted)."""
    why = groups.routed_why(group.unique_name, group.world_size)
    group._fk_routed = why == ""
    if group._fk_routed:
        groups.register_coordinator(group, lambda x: _native(group, x))
    return why


def _native(group, x):
    _in_native.on = True
    try:
        return group.all_reduce(x.clone())
    finally:
        _in_native.on = False


def all_reduce(ops, group, input_):
    """GroupCoordinator.all_reduce(input_) -> the reduced tensor (SGLang's callers use the result)."""
    op = ops.get(SLOT)
    if op is None or group.world_size == 1 or getattr(_in_native, "on", False):
        return Stock(SLOT)  # not counted: SGLang returns a 1-rank input at once; a native's own call
    if not getattr(group, "_fk_routed", False):
        return Stock(SLOT, "a group left stock")
    if stock := own_path(SLOT):  # the slot is out of place: the native would reduce a copy
        return stock
    return op(input_, group.unique_name)


TARGETS = (Target("sglang.srt.distributed.parallel_state.GroupCoordinator", (SLOT,), all_reduce,
                  method="all_reduce", built=group_built),)
