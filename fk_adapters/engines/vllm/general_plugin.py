"""vLLM general plugin (entry point ``vllm.general_plugins: fk_adapters``).

vLLM calls ``register()`` once in every process (driver, engine core, workers). With no
fk plugin selected (``FK_PLUGINS`` unset or empty) it returns at once and vLLM stays stock.
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger("fk_adapters.vllm")
_loaded_in: int | None = None  # pid that installed the kernels
_detail: dict = {}


def register() -> None:
    global _loaded_in
    if not os.environ.get("FK_PLUGINS", "").strip():
        return
    from fk_adapters import probe

    if _loaded_in is not None:
        if _loaded_in != os.getpid():
            _record_inherited()
        return
    _loaded_in = os.getpid()
    os.register_at_fork(after_in_child=_record_inherited)  # vLLM does not re-run plugins in forked processes
    from fk_adapters.plugins import allowlist_from_env, load_plugins, select_kernels, strict_from_env

    device = _device()
    detail = _detail
    detail["device"] = device
    try:
        plugins = load_plugins(allowlist_from_env(), strict=strict_from_env(), engine="vllm", device=device)
        chosen, notes = select_kernels(plugins, "vllm", device)
        detail["plugins"] = [p.describe() for p in plugins]
        detail["notes"] = notes
        from fk_adapters.engines.vllm.install import install

        detail["installed"] = {s: {"plugin": p, "kernel": k.label, "entered": cls}
                               for (s, (p, k)), cls in zip(chosen.items(), install(chosen).values())}
        log.info("fk-adapters: installed %s", {s: v["plugin"] for s, v in detail["installed"].items()})
    except Exception as exc:
        detail["error"] = f"{type(exc).__name__}: {exc}"
        probe.record_load("vllm", detail)
        raise  # a selected plugin that cannot be installed must not look like a stock run
    probe.record_load("vllm", detail)


def _record_inherited() -> None:
    """A forked engine process inherits the installed classes: record it as loaded too."""
    from fk_adapters import probe

    probe.record_load("vllm", dict(_detail, inherited_from=_loaded_in))


def _device() -> str:
    from vllm.platforms import current_platform

    return "cpu" if current_platform.is_cpu() else "cuda"
