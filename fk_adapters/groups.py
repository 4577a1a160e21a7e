"""The process groups a collective slot runs over, by name, as fk hands them to a kernel.

A collective kernel is called as ``all_reduce(x, group_name)`` (the name the engine gives its group, e.g. vLLM's
"tp:0"); ``get(group_name)`` gives it the :class:`Group`: its rank and size, the engine's own collective (``native``),
an all-gather in rank order and the torch.distributed process group. An engine adapter registers each group its
slots enter; fk check and the tests register a :func:`loopback` group: one process playing every rank.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

# the engines' names of tensor-parallel groups (before the ":<n>" that makes them unique): vLLM's "tp", SGLang's "tp"
# and the attention / MoE groups it splits off over the same kind of shards
TENSOR_PARALLEL = ("tp", "attention_tp", "moe_tp")
_GROUPS: dict[str, Group] = {}
_loopbacks = itertools.count()


@dataclass(frozen=True)
class Group:
    name: str
    rank: int
    world_size: int
    native: Callable  # native(x) -> the engine's own all-reduce of x (out of place)
    all_gather: Callable  # all_gather(x) -> Tensor[world_size, *x.shape], rank 0 first
    process_group: object | None = None  # torch.distributed ProcessGroup of the device (None in a loopback)


def routed_why(unique_name: str, world_size: int) -> str | None:
    """Why an engine's group of this unique name and size keeps the engine's all-reduce ("" when it routes to the
    all_reduce slot); None for a group of one rank, which never all-reduces."""
    if world_size <= 1:
        return None
    kind = unique_name.split(":")[0]
    return "" if kind in TENSOR_PARALLEL else f"group {kind!r}: not tensor parallel"


def register(group: Group) -> Group:
    _GROUPS[group.name] = group
    return group


def get(name: str) -> Group:
    try:
        return _GROUPS[name]
    except KeyError:
        raise KeyError(f"no process group {name!r} registered with fk in this process "
                       f"(registered: {sorted(_GROUPS) or 'none'})") from None


def loopback(peers: list, rank: int = 0) -> str:
    """Register a group where this process is ``rank`` and ``peers`` (one tensor per other rank, in rank order) are
    what the other ranks hold; return its name. Its native and all-gather sum / stack them as a real group would."""
    import torch

    world = len(peers) + 1

    def everyone(x):
        return peers[:rank] + [x] + peers[rank:]

    def all_gather(x):
        return torch.stack([p.to(x.dtype) for p in everyone(x)])

    def native(x):
        return all_gather(x).sum(0)

    name = f"fk-loopback:{next(_loopbacks)}"
    register(Group(name=name, rank=rank, world_size=world, native=native, all_gather=all_gather))
    return name


def all_reduce(x, group_name: str):
    """The engine's own all-reduce of ``x`` over ``group_name``: every engine's native for the all_reduce slot."""
    return get(group_name).native(x)


def register_coordinator(coordinator, native) -> Group:
    """Register an engine's group coordinator (vLLM's and SGLang's have the same shape) with ``native`` as its
    all-reduce; for the "tp" group, this process's evidence is then that of rank ``rank_in_group``."""
    from fk_adapters import probe

    def all_gather(x):
        return coordinator.all_gather(x.unsqueeze(0), dim=0)

    if coordinator.unique_name.split(":")[0] == "tp":
        probe.set_rank(coordinator.rank_in_group, coordinator.world_size)
    return register(Group(name=coordinator.unique_name, rank=coordinator.rank_in_group,
                          world_size=coordinator.world_size, native=native, all_gather=all_gather,
                          process_group=coordinator.device_group))
