"""diffusers models in the transformers host: ``[model] library = "diffusers"``, ``class`` (a diffusers model class)
and that class's config, with ``[model.scheduler]`` (``class`` and its config) for the denoising loop.

The checkpoint is a diffusers model folder (``config.json``, ``diffusion_pytorch_model.safetensors``) with the
scheduler's config in ``scheduler/``; both are loaded back with diffusers' own ``from_pretrained``. Weights follow
``fk_adapters.weights``' rule: the class's own seeded init, then every constant parameter spread.
"""
from __future__ import annotations

import importlib.util
import json
import os

from fk_adapters.engines.transformers.libraries import LibraryError, state_dict

SCHEDULER_DIR = "scheduler"
FK_KEYS = ("library", "class", "scheduler")  # [model] keys that are fk's, not the class's config


def version() -> str:
    import diffusers

    return diffusers.__version__


def class_config(table: dict) -> dict:
    """A [model] (or [model.scheduler]) table without fk's keys: the diffusers class's own config."""
    return {k: v for k, v in table.items() if k not in FK_KEYS}


def diffusers_class(name: str):
    import diffusers

    cls = getattr(diffusers, name, None)
    if not isinstance(cls, type):
        raise LibraryError(f"diffusers {diffusers.__version__} has no class {name!r}")
    return cls


def build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    """Build the model from its config (seeded), spread its constant parameters, save it and its scheduler."""
    import torch

    cls = diffusers_class(config["class"])
    model = state_dict.seeded(lambda: cls.from_config(class_config(config)), seed, device)
    # nn.Module's own cast: diffusers' ``to`` warns on any dtype; from_pretrained(torch_dtype=) keeps its float32
    # modules on loading
    torch.nn.Module.to(model, getattr(torch, dtype)).save_pretrained(out_dir)
    sched = config.get("scheduler")
    if sched:
        diffusers_class(sched["class"]).from_config(class_config(sched)).save_pretrained(
            os.path.join(out_dir, SCHEDULER_DIR))


def load(job: dict, device: str):
    """The model and its scheduler from the checkpoint, as the denoising loop of its class (``denoising.py``)."""
    import torch

    from fk_adapters.engines.transformers.libraries import denoising

    folder = job["model_dir"]
    model = diffusers_class(job["architectures"][0]).from_pretrained(
        folder, torch_dtype=getattr(torch, job["dtype"]), local_files_only=True,
        low_cpu_mem_usage=importlib.util.find_spec("accelerate") is not None).to(device).eval()
    path = os.path.join(folder, SCHEDULER_DIR, "scheduler_config.json")
    if not os.path.exists(path):
        raise LibraryError(f"{folder}: no {SCHEDULER_DIR}/scheduler_config.json ([model.scheduler] in the scenario)")
    with open(path, encoding="utf-8") as f:
        sched_cls = diffusers_class(json.load(f)["_class_name"])
    scheduler = sched_cls.from_pretrained(folder, subfolder=SCHEDULER_DIR, local_files_only=True)
    return denoising.loop(model, scheduler, job["inputs"])


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """Seeded inputs of one loop over ``b`` items (drawn on the CPU: the same on every device)."""
    import torch

    return model.inputs(spec, b, torch.Generator().manual_seed(seed), device, dtype)
