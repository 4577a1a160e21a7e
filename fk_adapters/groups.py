"""The process groups a collective slot runs over, by name, as fk hands them to a kernel.

A collective kernel is called as ``all_reduce(x, group_name)`` (the name the engine gives its group, e.g. vLLM's
"tp:0"); ``get(group_name)`` gives it the :class:`Group`: its rank and size, the engine's own collective (``native``),
an all-gather in rank order and the torch.distributed process group. An engine adapter registers each group its
slots enter. fk check plays every rank of a :func:`world` in one process (a thread per rank, meeting in the
groups' collectives as real ranks do; :func:`run_as_every_rank`); a :func:`loopback` group has fixed peers instead.
"""
from __future__ import annotations

import itertools
import threading
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
    process_group: object | None = None  # torch.distributed ProcessGroup of the device (None in one process)
    peer_calls: tuple = ()  # rank 0 of a world: (rank, the arguments that rank's kernel is called with) of the others
    abort: Callable = lambda: None  # releases every rank waiting in a collective of its world


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


def find(name: str) -> Group | None:
    return _GROUPS.get(name)


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


class _Rendezvous:
    """Where the threads playing a world's ranks meet: each leaves its tensor, all take everyone's in rank order."""

    def __init__(self, world: int, timeout_s: float):
        self.barrier, self.left = threading.Barrier(world, timeout=timeout_s), [None] * world

    def exchange(self, rank: int, t):
        import torch

        self.left[rank] = t
        self.barrier.wait()
        out = torch.stack([v.to(t.dtype) for v in self.left])
        self.barrier.wait()  # nobody leaves a new tensor before everyone took this round's
        return out


def world(xs: list, timeout_s: float = 120.0) -> str:
    """Register the groups of an in-process world of ``len(xs)`` ranks, rank r calling with ``xs[r]``; return rank 0's
    name. Through :func:`run_as_every_rank`, a kernel called with it runs once per rank, each in its own thread; their
    natives and all-gathers exchange what each rank really sends."""
    meet, base = _Rendezvous(len(xs), timeout_s), f"fk-world:{next(_loopbacks)}"
    names = [f"{base}:{r}" for r in range(len(xs))]
    for r, name in enumerate(names):
        def gather(x, r=r):
            return meet.exchange(r, x)

        register(Group(name=name, rank=r, world_size=len(xs), native=lambda x, g=gather: g(x).sum(0), all_gather=gather,
                       peer_calls=tuple((q, (xs[q], names[q])) for q in range(1, len(xs))) if r == 0 else (),
                       abort=meet.barrier.abort))
    return names[0]


def run_as_every_rank(fn, args: tuple):
    """``fn(*args)``; where an argument names rank 0 of a :func:`world`, every other rank's call of ``fn`` runs beside
    it in a thread (its tensors as ``args[0]``'s dtype and device, fresh copies): rank 0's result."""
    found = (find(a) for a in args if isinstance(a, str))
    group = next((g for g in found if g is not None and g.peer_calls), None)
    if group is None:
        return fn(*args)
    errors: list[BaseException] = []

    def call(peer_args):
        try:
            fn(*peer_args)
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread)
            errors.append(exc)
            group.abort()

    like = args[0]
    threads = [threading.Thread(target=call, args=(tuple(v.to(device=like.device, dtype=like.dtype, copy=True)
                                                         if hasattr(v, "to") else v for v in peer_args),))
               for _, peer_args in group.peer_calls]
    for t in threads:
        t.start()
    try:
        out = fn(*args)
    except BaseException as exc:
        group.abort()
        for t in threads:
            t.join()
        if not isinstance(exc, threading.BrokenBarrierError):
            raise
        if errors:  # another rank failed first: its error is the one to tell
            raise errors[0] from None
        raise RuntimeError(f"the ranks of {group.name} did not all reach its collectives in time") from None
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


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
