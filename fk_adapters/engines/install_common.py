"""What every engine's ``install(chosen)`` does around its own seam: wrap each chosen kernel as an fk op over the
engine's natives, hand the ops to the places that host their slots, and list per slot where each entered."""
from __future__ import annotations

from fk_adapters.engines import calls
from fk_adapters.engines.loading import kernel_callable


def wrap_chosen(chosen: dict, natives: dict) -> dict:
    """{slot: the fk op (``ops.wrap``) of the kernel chosen for it}; ``chosen``: {slot: (plugin, Kernel)}."""
    from fk_adapters import ops
    from fk_adapters.tasks import SLOTS

    return {slot: ops.wrap(plugin, SLOTS[slot], kernel_callable(k, natives, ops.op_key(plugin, slot)), k.dtypes,
                           natives.get(slot))
            for slot, (plugin, k) in chosen.items()}


def engine_own_ops(chosen: dict, natives: dict) -> dict[str, str]:
    """{slot: op key} of the chosen kernels that are the engine's own (``loading.engine_own``): seams may leave their
    calls where the engine's mode runs that op, counted (``calls.on_native_path``)."""
    from fk_adapters.engines.loading import ENGINE_OWN, engine_own
    from fk_adapters.ops import op_key

    own = {slot: op_key(plugin, slot) for slot, (plugin, k) in chosen.items() if engine_own(k, natives, slot)}
    ENGINE_OWN.update(own)
    return own


def enter(chosen: dict, ops_by_slot: dict, hosts, register) -> dict[str, list[str]]:
    """Hand every host its slots' ops and list where they entered: {slot: [what ``register`` returned]}.

    ``hosts``: (host, the slots it hosts) pairs, in order; ``register(host, {slot: op}) -> str`` enters them (a host
    none of whose slots was chosen is skipped)."""
    entered: dict[str, list[str]] = {s: [] for s in chosen}
    for host, slots in hosts:
        mine = {s: ops_by_slot[s] for s in slots if s in ops_by_slot}
        if not mine:
            continue
        where = register(host, mine)
        for s in mine:
            entered[s].append(where)
    return entered


def checked_drift(params: calls.Params, cls, methods: tuple[str, ...], log) -> tuple[str, str]:
    """``calls.drift`` of the installed ``cls`` against ``params``, each finding logged as a warning."""
    drift, note = calls.drift(params, cls, methods)
    for why in filter(None, (drift, note)):
        log.warning("fk-adapters: %s", why)
    return drift, note


def where(name: str, note: str) -> str:
    """How an entry point is listed: its name, with the drift note when there is one."""
    return name + (f" ({note})" if note else "")
