"""What every engine's entry point does once per process: load the selected plugins, install
their kernels, and record the outcome (also on failure) for the runner.

In capture mode (``FK_CAPTURE=1``, ``fk capture``) no plugin is loaded: the built-in recorder
routes every slot the engine hosts to the engine's own kernel, and the ops count the calls.
"""
from __future__ import annotations

import functools

from fk_adapters import probe
from fk_adapters.kernel import DEVICES, DTYPES, ENGINES, Kernel

CAPTURE_PLUGIN = "fk-capture"


def kernel_callable(kernel: Kernel, natives: dict, key: str = ""):
    """The plain callable for a kernel: its fn, or its factory applied to the engine's own kernel (with ``key``, an
    op key: counted in ``probe.native_entered`` each time the plugin's kernel calls it)."""
    if kernel.fn is not None:
        return kernel.fn
    native = natives[kernel.slot]
    return kernel.factory(_counted(native, key) if key else native)


def _counted(native, key: str):
    @functools.wraps(native)
    def engine_op(*args, **kwargs):
        probe.native_entered[key] += 1
        return native(*args, **kwargs)

    return engine_op


def engine_own(kernel: Kernel, natives: dict, slot: str) -> bool:
    """Whether ``kernel`` is the engine's own kernel itself (a passthrough: its factory hands back the native it is
    given), so that an adapter may leave its calls wherever the engine's mode runs that op. Never in capture mode,
    whose op records every call."""
    if kernel.fn is not None or slot not in natives or probe.capturing():
        return False
    return kernel.factory(natives[slot]) is natives[slot]


# the slots whose chosen kernel is the engine's own (``install_common.engine_own_ops``), as this process's install found
# them: {slot: the op key}. The load record marks them, and no speedup is claimed for them; seams whose routed call
# would differ from stock's leave their calls on the engine's own code, counted (``calls.on_native_path``)
ENGINE_OWN: dict[str, str] = {}


def own_key(slot: str) -> str:
    """The op key of ``slot``'s chosen kernel where it is the engine's own (``ENGINE_OWN``), else ''."""
    return ENGINE_OWN.get(slot, "")


def capture_slots(engine: str, slots=None) -> list[str]:
    """The catalog slots that enter ``engine`` (of ``slots``, where the process's entries are its own)."""
    from fk_adapters.tasks import SLOTS

    return [name for name, slot in SLOTS.items() if (engine in slot.entries if slots is None else name in slots)]


def _native(native):
    return native


def capture_plugin(engine: str, slots=None):
    """The recorder, as a loaded plugin: the engine's own kernel in every slot it hosts (``capture_slots``)."""
    from fk_adapters import __version__
    from fk_adapters.plugins import LoadedPlugin

    kernels = [Kernel(slot=s, factory=_native, name=f"engine:{s}", engines=ENGINES, dtypes=DTYPES, devices=DEVICES,
                      cuda_graph_safe=True, compile_safe=True) for s in capture_slots(engine, slots)]
    return LoadedPlugin(name=CAPTURE_PLUGIN, dist="fk-adapters", version=__version__,
                        target=f"{__name__}:capture_plugin", kernels=kernels,
                        info={"backend": "engine's own kernels, call signatures recorded"})


def load_and_install(engine: str, device: str, install, detail: dict, slots=None) -> dict:
    """Fill ``detail`` with the plugins, skip notes and installed slots; write the load record. ``slots``: the slots
    this process's entries reach, where not the catalog's for the engine (``plugins.select_kernels``).

    ``install(chosen) -> {slot: [where it entered]}`` is the engine's own seam. A failure is
    recorded and raised: a selected plugin that cannot be installed must not look like a stock run
    (engines log a failing plugin and go on, so the record is what the runner sees).
    """
    from fk_adapters.plugins import allowlist_from_env, load_plugins, select_kernels, strict_from_env

    detail["device"] = device
    try:
        if probe.capturing():
            detail["capture"] = True
            plugins = [capture_plugin(engine, slots)]
        else:
            plugins = load_plugins(allowlist_from_env(), strict=strict_from_env(), engine=engine, device=device)
        chosen, notes = select_kernels(plugins, engine, device, slots)
        detail["plugins"] = [p.describe() for p in plugins]
        detail["notes"] = notes
        ENGINE_OWN.clear()  # this install's (a process may install for more than one host)
        entered = install(chosen)
        detail["installed"] = {s: {"plugin": p, "kernel": k.label, "entered": where}
                               for (s, (p, k)), where in zip(chosen.items(), entered.values())}
        _mark_engine_own(detail)
    except Exception as exc:
        detail["error"] = f"{type(exc).__name__}: {exc}"
        probe.record_load(engine, detail)
        raise
    probe.record_load(engine, detail)
    _recorded[engine] = detail
    return detail


_recorded: dict[str, dict] = {}  # this process's load record per engine, for hosts entered after the install


def entered_later(engine: str, name: str, where: str) -> None:
    """Host ``name``, listed at the install, was registered later (when its module was imported) as ``where``: the load
    record lists it so (with the drift note it may carry)."""
    detail = _recorded.get(engine)
    if not detail or where == name:
        return
    for entry in detail.get("installed", {}).values():
        entry["entered"] = [where if w == name else w for w in entry["entered"]]
    _mark_engine_own(detail)  # a host entered later (SGLang's diffusers fallback) finds its natives then
    probe.record_load(engine, detail)


def _mark_engine_own(detail: dict) -> None:
    """Mark each installed slot whose chosen kernel an install found to be the engine's own (``ENGINE_OWN``: {slot:
    the op key of the plugin's kernel})."""
    from fk_adapters.ops import op_key

    for slot, entry in detail.get("installed", {}).items():
        if ENGINE_OWN.get(slot) == op_key(entry["plugin"], slot):
            entry["engine_own"] = True
