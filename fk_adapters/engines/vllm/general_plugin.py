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
    from fk_adapters.plugins import any_selected_in_env

    if not any_selected_in_env():
        return
    if _loaded_in is not None:
        if _loaded_in != os.getpid():
            _record_inherited()
        return
    _loaded_in = os.getpid()
    os.register_at_fork(after_in_child=_record_inherited)  # vLLM does not re-run plugins in forked processes
    from fk_adapters.engines.loading import load_and_install
    from fk_adapters.engines.vllm.install import install

    load_and_install("vllm", _device(), install, _detail)
    log.info("fk-adapters: installed %s", {s: v["plugin"] for s, v in _detail["installed"].items()})


def _record_inherited() -> None:
    """A forked engine process inherits the installed classes: record it as loaded too."""
    from fk_adapters import probe

    probe.record_load("vllm", dict(_detail, inherited_from=_loaded_in))


def _device() -> str:
    from vllm.platforms import current_platform

    return "cpu" if current_platform.is_cpu() else "cuda"
