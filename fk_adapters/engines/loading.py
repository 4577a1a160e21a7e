"""What every engine's entry point does once per process: load the selected plugins, install
their kernels, and record the outcome (also on failure) for the runner."""
from __future__ import annotations

from fk_adapters import probe
from fk_adapters.kernel import Kernel


def kernel_callable(kernel: Kernel, natives: dict):
    """The plain callable for a kernel: its fn, or its factory applied to the engine's own kernel."""
    return kernel.fn if kernel.fn is not None else kernel.factory(natives[kernel.slot])


def load_and_install(engine: str, device: str, install, detail: dict) -> dict:
    """Fill ``detail`` with the plugins, skip notes and installed slots; write the load record.

    ``install(chosen) -> {slot: [where it entered]}`` is the engine's own seam. A failure is
    recorded and raised: a selected plugin that cannot be installed must not look like a stock run
    (engines log a failing plugin and go on, so the record is what the runner sees).
    """
    from fk_adapters.plugins import allowlist_from_env, load_plugins, select_kernels, strict_from_env

    detail["device"] = device
    try:
        plugins = load_plugins(allowlist_from_env(), strict=strict_from_env(), engine=engine, device=device)
        chosen, notes = select_kernels(plugins, engine, device)
        detail["plugins"] = [p.describe() for p in plugins]
        detail["notes"] = notes
        detail["installed"] = {s: {"plugin": p, "kernel": k.label, "entered": where}
                               for (s, (p, k)), where in zip(chosen.items(), install(chosen).values())}
    except Exception as exc:
        detail["error"] = f"{type(exc).__name__}: {exc}"
        probe.record_load(engine, detail)
        raise
    probe.record_load(engine, detail)
    return detail
