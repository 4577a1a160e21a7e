"""timm models in the transformers host: ``[model] library = "timm"``, ``class`` (a timm model name, as
``timm.create_model`` takes it) and its keyword arguments (``num_classes``, ...).

The checkpoint is ``config.json`` (the name and arguments) and ``model.safetensors`` (the state dict), loaded back
into ``timm.create_model``'s model. Weights follow ``fk_adapters.weights``' rule: timm's own seeded init, then every
constant parameter spread.

timm imports torchvision (its ops module, for a frozen batch norm class): ``torchvision_site`` makes it importable.
"""
from __future__ import annotations

import json
import os
import types

from fk_adapters.engines.transformers.libraries import LibraryError, torchvision_site

FK_KEYS = ("library", "class")


def import_timm():
    torchvision_site.importable()
    import timm

    return timm


def version() -> str:
    return import_timm().__version__


def class_config(table: dict) -> dict:
    """A [model] table without fk's keys: ``timm.create_model``'s keyword arguments."""
    return {k: v for k, v in table.items() if k not in FK_KEYS}


def _create(name: str, kwargs: dict):
    timm = import_timm()
    if name not in timm.list_models():
        raise LibraryError(f"timm {timm.__version__} has no model {name!r}")
    return timm.create_model(name, pretrained=False, **kwargs)


def build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    """Build the model (seeded), spread its constant parameters, save its state dict and how to build it."""
    import torch
    from safetensors.torch import save_file

    from fk_adapters.weights import spread_constants

    torch.manual_seed(seed)
    with torch.device(device):
        model = _create(config["class"], class_config(config))
    spread_constants(model, seed)
    os.makedirs(out_dir, exist_ok=True)
    state = {k: v.to(getattr(torch, dtype)).contiguous() for k, v in model.state_dict().items()
             if v.is_floating_point()}
    state.update({k: v.contiguous() for k, v in model.state_dict().items() if not v.is_floating_point()})
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump({"library": "timm", "class": config["class"], "kwargs": class_config(config)}, f, indent=1)


def load(job: dict, device: str):
    """The model timm builds from the checkpoint's name and arguments, with its saved state dict, in the job's
    dtype."""
    import torch
    from safetensors.torch import load_file

    folder = job["model_dir"]
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    model = _create(cfg["class"], cfg["kwargs"])
    model.load_state_dict(load_file(os.path.join(folder, "model.safetensors")))
    model.config = types.SimpleNamespace(**cfg)  # what the host reads of a model's config
    return model.to(device=device, dtype=getattr(torch, job["dtype"])).eval()


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """Seeded images [b, channels, image_size, image_size] (drawn on the CPU: the same on every device)."""
    import torch

    s, c = int(spec["image_size"]), int(spec.get("channels", 3))
    gen = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(b, c, s, s, generator=gen).to(device=device, dtype=dtype)}
