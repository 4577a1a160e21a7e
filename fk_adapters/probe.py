"""Per-process evidence that plugin kernels were installed and ran.

Counters live in the engine process that runs the model; the engine adapters expose
``snapshot()`` to the driver (for vLLM through a worker extension). ``record_load``
writes one JSON file per process into ``$FK_RUN_DIR/loads`` so the runner can see every
process the plugins were loaded into. In capture mode (``FK_CAPTURE=1``, see ``fk capture``)
``signatures`` also counts every distinct call signature per slot.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter, defaultdict

ENV_RUN_DIR = "FK_RUN_DIR"
ENV_CAPTURE = "FK_CAPTURE"

calls: Counter = Counter()
constructed: Counter = Counter()
not_routed: Counter = Counter()  # {what stayed on the engine's stock path (why): layers or calls}
stock_layers: Counter = Counter()  # {slot: layers built for it that can never route to a plugin}
traced: Counter = Counter()
native_path: Counter = Counter()  # {op key: engine-own calls left on the engine's own compiled path}
native_entered: Counter = Counter()  # {op key: calls of the engine's own op through the native its factory was given}
native_inside: Counter = Counter()  # {op key: plugin calls during which that engine op ran (a wrapper or a fallback)}
ops_watched: Counter = Counter()  # {op key: calls whose dispatched ops were watched (``op_watch``)}
engine_ops_inside: Counter = Counter()  # {op key: watched calls that dispatched the native's engine op}
native_ops: dict[str, list[str]] = {}  # {op key: [the native's first engine op], as ``op_watch`` read it; [] if none}
signatures: defaultdict[str, Counter] = defaultdict(Counter)  # {slot: {signature key: calls}}, capture mode only
value_stats: defaultdict[str, dict] = defaultdict(dict)  # {slot: {signature key: {arg: sums}}}, capture mode only
rank: dict = {}  # {"rank", "world_size"} of this process's tensor-parallel group, where it has one of 2+ ranks


def capturing() -> bool:
    return os.environ.get(ENV_CAPTURE, "").strip() == "1"


def hit(key: str) -> None:
    calls[key] += 1


def on_native_path(key: str) -> None:
    """An engine-own kernel's call (``key``: its op) was left on the engine's own path of a compiled build, as stock
    runs it (``calls.on_native_path``: once per torch.compile trace, per call outside one)."""
    native_path[key] += 1


def left_stock(slots, label: str) -> None:
    """A layer built for ``slots`` stays on the engine's stock path; ``label`` names it and says why."""
    not_routed[label] += 1
    stock_layers.update(slots)


def call_left_stock(slot: str, why: str, traced: bool = False) -> None:
    """A call of ``slot`` ran the engine's own path with every argument it was given; ``why`` says why.

    ``traced``: counted once when torch.compile traced the call (the compiled graph then runs it stock
    on every call), not per call."""
    not_routed[f"{slot} (call{', counted once per compiled trace' if traced else ''}: {why})"] += 1


def layer_built(slots, why: str | None = None) -> None:
    """A layer built for each of ``slots``: routable to the plugin, or left stock when ``why`` says why not."""
    for s in slots:
        if why:
            left_stock((s,), f"{s} ({why})")
        else:
            constructed[s] += 1


def layer_bypassed(slots, why: str) -> None:
    """A layer counted as built for ``slots`` turned out never to be called (its owner runs its own kernel instead):
    it counts as left stock, ``why`` saying so."""
    for s in slots:
        constructed[s] -= 1
        left_stock((s,), f"{s} ({why})")


def set_rank(rank_in_group: int, world_size: int) -> None:
    """This process is rank ``rank_in_group`` of a tensor-parallel group of ``world_size``: its evidence is per rank."""
    rank.update(rank=rank_in_group, world_size=world_size)


def reset_calls() -> None:
    calls.clear()
    native_entered.clear()
    native_inside.clear()
    ops_watched.clear()
    engine_ops_inside.clear()
    native_ops.clear()
    signatures.clear()
    value_stats.clear()


def forget_parents_calls() -> None:
    """In a forked child: the calls (and traces) its parent made are not this process's evidence."""
    reset_calls()
    traced.clear()
    native_path.clear()


def snapshot() -> dict:
    return {"pid": os.getpid(), **rank, "calls": dict(calls), "constructed": dict(constructed),
            "not_routed": dict(not_routed), "stock_layers": dict(stock_layers), "traced": dict(traced),
            "native_path": dict(native_path), "native_inside": dict(native_inside), "ops_watched": dict(ops_watched),
            "engine_ops_inside": dict(engine_ops_inside), "native_ops": dict(native_ops),
            "signatures": {slot: dict(c) for slot, c in signatures.items()},
            "value_stats": _value_stats()}


def _value_stats() -> dict:
    if not value_stats:
        return {}
    from fk_adapters.check.value_stats import export

    return export(value_stats)


def merged(snapshots: list[dict] | None, field: str) -> Counter:
    """One counter of ``snapshot()`` (calls, constructed, not_routed, stock_layers, traced, native_path), summed over
    per-process snapshots."""
    out: Counter = Counter()
    for snap in snapshots or []:
        out.update(snap.get(field, {}))
    return out


def process_role() -> str:
    try:
        import setproctitle  # vLLM names its processes (EngineCore, Worker)

        title = setproctitle.getproctitle()
    except ImportError:
        title = ""
    if "multiprocessing" in title:  # a spawned child not yet named by its engine (SGLang's scheduler)
        import multiprocessing

        return f"{multiprocessing.current_process().name} (multiprocessing child of {os.getppid()})"
    return title or " ".join(sys.argv[:2])


def run_dir() -> str | None:
    """The folder of the engine run this process belongs to ($FK_RUN_DIR), None outside fk's runner."""
    return os.environ.get(ENV_RUN_DIR) or None


def record_load(engine: str, detail: dict) -> None:
    """Write this process's load record, if the runner asked for records."""
    folder = run_dir()
    if not folder:
        return
    loads = os.path.join(folder, "loads")
    os.makedirs(loads, exist_ok=True)
    record = {"pid": os.getpid(), "ppid": os.getppid(), "engine": engine, "role": process_role(),
              "time": time.time(), **detail}
    with open(os.path.join(loads, f"{engine}-{os.getpid()}.json"), "w") as f:
        json.dump(record, f, indent=1, default=str)


def read_loads(run_dir: str) -> list[dict]:
    loads = os.path.join(run_dir, "loads")
    if not os.path.isdir(loads):
        return []
    out = []
    for name in sorted(os.listdir(loads)):
        with open(os.path.join(loads, name)) as f:
            out.append(json.load(f))
    return out
