"""vLLM general plugin (entry point ``vllm.general_plugins: fk_adapters``).

vLLM calls ``register()`` once in every process it starts fresh (driver, spawned engine core, spawned workers), not
in a forked one. With no fk plugin selected (``FK_PLUGINS`` unset or empty) it returns at once and vLLM stays stock.
fk's own driver builds no model (its engine core does): there, ``serve_from_forks`` moves the install into the engine
processes it forks. Importing vLLM's layers in the driver initialised CUDA there, and vLLM then spawned the
candidate's engine core where a stock run forks it: the two sides started differently, the candidate 26 s slower
(session 47's H100 engine logs: "Reasons: CUDA is initialized" in the candidate's alone).
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger("fk_adapters.vllm")
_loaded_in: int | None = None  # pid that installed the kernels
_front_end: int | None = None  # pid of a driver whose forked engine processes install them (``serve_from_forks``)
_fork_hook = False
_detail: dict = {}
FORK_OF_FRONT_END = "a fork of fk's driver"  # ``installed_in`` of a load record; else vLLM's plugin call


def serve_from_forks() -> None:
    """This process builds no model: install the kernels in the engine processes it forks, not here."""
    global _front_end
    _front_end = os.getpid()


def register() -> None:
    from fk_adapters.plugins import any_selected_in_env

    if not any_selected_in_env():
        return
    _hook_forks()
    if _loaded_in is not None:
        if _loaded_in != os.getpid():
            _record_inherited()
        return
    if _front_end != os.getpid():
        _install()


def _hook_forks() -> None:
    global _fork_hook
    if not _fork_hook:
        _fork_hook = True
        os.register_at_fork(after_in_child=_in_fork)


def _in_fork() -> None:
    """A forked process: vLLM does not run plugins there. It inherits the kernels of a process that installed them
    (recorded as loaded too); a fork of a front end installs them itself. Either counts only its own calls."""
    from fk_adapters import probe

    probe.forget_parents_calls()
    if _loaded_in is not None:
        _record_inherited()
    elif _front_end is not None:
        _install(FORK_OF_FRONT_END)


def _install(where: str = "vLLM's plugin call") -> None:
    global _loaded_in
    _loaded_in = os.getpid()
    _detail["installed_in"] = where
    from fk_adapters.engines.loading import load_and_install
    from fk_adapters.engines.vllm.install import install

    cuda = _cuda_initialized() if where == FORK_OF_FRONT_END else None
    load_and_install("vllm", _device(), install, _detail)
    if cuda is False and _cuda_initialized():  # stock's forked engine core has no CUDA yet at this point
        from fk_adapters import probe

        _detail["cuda_initialized_by_install"] = True
        probe.record_load("vllm", _detail)
    log.info("fk-adapters: installed %s", {s: v["plugin"] for s, v in _detail["installed"].items()})


def _cuda_initialized() -> bool:
    import torch

    return torch.cuda.is_initialized()


def _record_inherited() -> None:
    from fk_adapters import probe

    probe.record_load("vllm", dict(_detail, inherited_from=_loaded_in))


def _device() -> str:
    from vllm.platforms import current_platform

    return "cpu" if current_platform.is_cpu() else "cuda"
