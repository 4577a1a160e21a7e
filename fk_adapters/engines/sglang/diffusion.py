"""fk inside SGLang's diffusion workers (``sglang.multimodal_gen``; ``docs/design/sglang-diffusion.md`` section 4).

The workers are spawned processes that never call SGLang's ``load_plugins()``. A diffusion driver calls
``register()`` at its module's top level, which every spawned worker imports again (as ``__mp_main__``) before it
builds the pipeline. With no fk plugin selected it returns at once and SGLang stays stock. Otherwise it hooks the
diffusion runtime's targets (``diffusion_targets``) through SGLang's HookRegistry and applies them (nothing else
will in a worker), hooks the diffusers fallback's pipeline loading to route the kernels into its denoiser
(``diffusion_fallback``), and adds two request types to each worker's scheduler for the probe: the driver sends
``FkProbeDumpReq`` / ``FkProbeResetReq`` as it sends generation requests, the analogue of SRT's
``collective_rpc("fk_probe_dump")``.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

log = logging.getLogger("fk_adapters.sglang")
ENGINE = "sglang"
SCHEDULER_INIT = "sglang.multimodal_gen.runtime.managers.scheduler.Scheduler.__init__"
_loaded_in: int | None = None  # pid that registered the hooks


@dataclass(frozen=True)
class FkProbeDumpReq:
    """Write the worker's ``probe.snapshot()`` to ``out_dir/probe-<tag>-<pid>.json``."""

    out_dir: str
    tag: str = "probe"


@dataclass(frozen=True)
class FkProbeResetReq:
    """Zero the worker's call counters (after a warm-up)."""


def register() -> None:
    """Install the selected kernels in this process once (a no-op without ``FK_PLUGINS``)."""
    global _loaded_in
    from fk_adapters.plugins import any_selected_in_env

    if not any_selected_in_env() or _loaded_in == os.getpid():
        return
    _loaded_in = os.getpid()
    from fk_adapters.engines.loading import load_and_install
    from fk_adapters.engines.sglang import diffusion_fallback

    # the slots this runtime's entries reach (sdpa too, which SRT has none for: the catalog's "not_entered"), and
    # those the diffusers fallback routes into its denoiser module by module (conv2d, layer_norm, ...)
    detail = load_and_install(ENGINE, "cuda", _install, {}, slots=runtime_slots() | diffusion_fallback.slots())
    log.info("fk-adapters: hooked %s in a diffusion worker", {s: v["plugin"] for s, v in detail["installed"].items()})


def runtime_slots() -> set[str]:
    """The slots the diffusion runtime's own layers host (``diffusion_targets.TARGETS``)."""
    from fk_adapters.engines.sglang.diffusion_targets import TARGETS

    return {s for t in TARGETS for s in t.slots}


def _install(chosen: dict) -> dict:
    """SGLang's install of the runtime's slots (over SGLang's natives), then the fallback's hook; every chosen slot
    listed in ``chosen``'s order, the fallback's alone (conv2d, layer_norm) entered there only."""
    from sglang.srt.plugins import hook_registry

    from fk_adapters.engines.sglang import diffusion_fallback, diffusion_targets, general_plugin
    from fk_adapters.engines.sglang.install import install

    own = runtime_slots()
    entered = install({s: v for s, v in chosen.items() if s in own}, diffusion_targets.TARGETS)
    entered = {s: entered.get(s, []) for s in chosen}
    hook_registry.HookRegistry.register(SCHEDULER_INIT, scheduler_init_hook, hook_registry.HookType.AROUND)
    entered = diffusion_fallback.register(hook_registry, chosen, entered)
    hook_registry.HookRegistry.apply_hooks()
    general_plugin.dump_at_exit()
    return entered


def scheduler_init_hook(original, scheduler, *args, **kwargs):
    """Build the scheduler, then give it handlers for fk's probe requests (its ``request_handlers`` dispatch by the
    request's type)."""
    original(scheduler, *args, **kwargs)
    scheduler.request_handlers[FkProbeDumpReq] = _dump
    scheduler.request_handlers[FkProbeResetReq] = _reset


def _done():
    from sglang.multimodal_gen.runtime.pipelines_core.schedule_batch import OutputBatch

    return OutputBatch()


def _dump(reqs: list) -> object:
    from fk_adapters.engines.sglang.general_plugin import write_probe

    write_probe(reqs[0].out_dir, reqs[0].tag)
    return _done()


def _reset(reqs: list) -> object:
    from fk_adapters import probe

    probe.reset_calls()
    return _done()
