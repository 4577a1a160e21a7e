"""SGLang general plugin (entry point ``sglang.srt.plugins: fk_adapters``).

SGLang's ``load_plugins()`` calls ``register()`` once per process (the Engine process and
every scheduler / TP rank), before the model is built, then applies the registered hooks.
``SGLANG_PLUGINS`` is SGLang's allowlist of entry-point names: name ``fk_adapters`` in it if
you set it. With no fk plugin selected (``FK_PLUGINS`` unset or empty) this returns at once
and SGLang stays stock.

Evidence: besides the load record, each process adds two methods to ``Scheduler`` that the
driver reaches through ``Engine.collective_rpc`` (which calls ``getattr(scheduler, name)``
on every rank and returns nothing): ``fk_probe_dump(out_dir, tag)`` writes this process's
``probe.snapshot()`` to ``out_dir/probe-<tag>-<pid>.json``, and ``fk_probe_reset()``.
A final snapshot is also written at exit to ``$FK_RUN_DIR/probe/probe-exit-<pid>.json``
(best effort: SGLang may kill its schedulers without running atexit handlers).
"""
from __future__ import annotations

import atexit
import json
import logging
import os

log = logging.getLogger("fk_adapters.sglang")
ENGINE = "sglang"
_loaded_in: int | None = None  # pid that registered the hooks


def register() -> None:
    global _loaded_in
    from fk_adapters.plugins import any_selected_in_env

    if not any_selected_in_env():
        return
    if _loaded_in == os.getpid():
        return
    _loaded_in = os.getpid()
    from fk_adapters.engines.loading import load_and_install

    # SGLang's hooked path is forward_cuda: there is no CPU path
    detail = load_and_install(ENGINE, "cuda", _install, {})
    log.info("fk-adapters: hooked %s", {s: v["plugin"] for s, v in detail["installed"].items()})


def _install(chosen: dict) -> dict:
    """Hooks, then the probe's RPC methods and exit dump; a failure in any is in the load record."""
    from fk_adapters.engines.sglang.install import install

    entered = install(chosen)
    _add_rpc_methods()
    dump_at_exit()
    return entered


def write_snapshot(path: str, **extra) -> None:
    from fk_adapters import probe

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({**probe.snapshot(), **extra}, f)


def write_probe(out_dir: str, tag: str, **extra) -> None:
    """This process's snapshot as ``out_dir/probe-<tag>-<pid>.json``, the name ``driver.read_probes`` reads."""
    write_snapshot(os.path.join(out_dir, f"probe-{tag}-{os.getpid()}.json"), **extra)


def fk_probe_dump(self, out_dir: str, tag: str = "probe") -> None:
    """This scheduler's snapshot; under tensor parallelism (``tp_size`` > 1) with its rank, judged per rank.
    SGLang 0.5.15 keeps a scheduler's ranks in ``self.ps`` (its ``ParallelState``)."""
    ps = getattr(self, "ps", None)
    tp_rank, tp_size = getattr(ps, "tp_rank", None), getattr(ps, "tp_size", 1) or 1
    ranked = {"rank": tp_rank, "world_size": tp_size} if tp_size > 1 and tp_rank is not None else {}
    write_probe(out_dir, tag, tp_rank=tp_rank, **ranked)


def fk_probe_reset(self) -> None:
    from fk_adapters import probe

    probe.reset_calls()


def _add_rpc_methods() -> None:
    from sglang.srt.managers.scheduler import Scheduler

    Scheduler.fk_probe_dump = fk_probe_dump
    Scheduler.fk_probe_reset = fk_probe_reset


def dump_at_exit() -> None:
    run_dir = os.environ.get("FK_RUN_DIR")
    if run_dir:
        atexit.register(lambda: write_snapshot(os.path.join(run_dir, "probe", f"probe-exit-{os.getpid()}.json")))
