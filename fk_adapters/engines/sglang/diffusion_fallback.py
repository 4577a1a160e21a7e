"""fk's kernels in SGLang's diffusers fallback (``docs/design/sglang-diffusion.md`` section 7).

SGLang 0.5.15 serves a pipeline it has no model of (SDXL, HunyuanVideo-1.5) with diffusers' own code
(``DiffusersPipeline``), which none of its hooked layers enters. An AROUND hook on the method that loads that pipeline
(``LOAD``) calls it, then routes the selected kernels into the pipeline's denoiser with the transformers host's
module routing (``engines/transformers/install.py``): the pipeline is then on its device in its dtype, and a module
enters a slot only after its forward agrees with the slot's math on a seeded input; the rest stay stock, counted.

Only the denoiser: fk's requests feed the text embeddings and take latents, so the text encoders and the VAE never
run. Only the slots routed module by module (``slots()``: conv2d, layer_norm, gemm, ...), which a diffusion worker
selects beside its runtime's own (``diffusion.register``): diffusers' attention is not transformers' attention
registry (sdpa). The transformers host wraps them over its own natives (torch's ops), so a passthrough computes what
the stock modules do; a chosen slot no module of the denoiser takes is entered nowhere (0 layers: the report's n/a).
"""
from __future__ import annotations

import logging
import os

from fk_adapters.engines import install_common

log = logging.getLogger("fk_adapters.sglang")
LOAD = "sglang.multimodal_gen.runtime.pipelines.diffusers_pipeline.DiffusersPipeline._load_diffusers_pipeline"
DENOISERS = ("unet", "transformer", "transformer_2")  # the pipeline components that denoise
WHERE = install_common.where(LOAD, "diffusers fallback: the transformers host's module routing of its denoiser")
RAW_LATENTS = "FK_SGLANG_RAW_LATENTS"  # set by fk's diffusion driver; its spawned workers inherit it


def slots() -> set[str]:
    """The slots the transformers host routes module by module (its natives less its scan and attention slots)."""
    from fk_adapters.engines.transformers import attention, recurrent
    from fk_adapters.engines.transformers.natives import NATIVES

    return set(NATIVES) - {*recurrent.SLOTS, attention.SLOT}


def routed(chosen: dict) -> dict:
    """The chosen kernels whose slots the transformers host routes module by module."""
    mine = slots()
    return {s: v for s, v in chosen.items() if s in mine}


def register(hook_registry, chosen: dict, entered: dict) -> dict:
    """Hook ``LOAD`` when a chosen slot can enter the fallback; returns ``entered`` with ``WHERE`` listed for those
    slots (the hooks are applied by the caller)."""
    mine = routed(chosen)
    if not mine:
        return entered
    hook_registry.HookRegistry.register(LOAD, load_hook(mine), hook_registry.HookType.AROUND)
    return {s: [*where, WHERE] if s in mine else where for s, where in entered.items()}


def load_hook(chosen: dict):
    """The AROUND hook of ``LOAD``: load the pipeline as SGLang does, then route ``chosen`` into its denoiser."""
    def hook(original, pipeline, *args, **kwargs):
        pipe = original(pipeline, *args, **kwargs)
        route(pipe, chosen)
        return pipe

    return hook


def route(pipe, chosen: dict) -> dict[str, list[str]]:
    """Route ``chosen`` into every denoiser of the diffusers pipeline ``pipe``: {slot: ["component: class", ...]}."""
    from torch import nn

    from fk_adapters.engines.transformers.install import install

    entered: dict[str, list[str]] = {s: [] for s in chosen}
    for name in DENOISERS:
        model = getattr(pipe, name, None)
        if isinstance(model, nn.Module):
            for slot, classes in install(model, chosen).items():
                entered[slot] += [f"{name}: {c}" for c in classes]
    log.info("fk-adapters: routed into the diffusers fallback's %s: %s", type(pipe).__name__, entered)
    return entered


def keep_raw_latents() -> None:
    """In a process of fk's diffusion driver (``RAW_LATENTS`` set), baseline or candidate alike: the fallback hands
    back its latents as float32, as fk asks for them (``output_type="latent"``). Its own post-processing treats every
    output as an image: rescaled to [0, 1] and clamped (most of a latent's values end at 0 or 1), NaN and inf replaced
    (a kernel's NaN would read 0.5), a video's axes swapped. Set at run time in fk's processes only; no file changes."""
    if os.environ.get(RAW_LATENTS) != "1":
        return
    from sglang.multimodal_gen.runtime.pipelines.diffusers_pipeline import DiffusersExecutionStage

    DiffusersExecutionStage._postprocess_output = _as_float


def _as_float(stage, output):
    return output.cpu().float()
