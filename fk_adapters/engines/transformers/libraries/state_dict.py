"""A checkpoint that is a model's state dict (``model.safetensors``) beside the JSON that says how to build it
(``config.json``): the form of the libraries whose models have no checkpoint format of their own here (timm,
ultralytics, torch_geometric, nerfstudio, lerobot, torch-pointcloud, gsplat)."""
from __future__ import annotations

import json
import os

CONFIG, WEIGHTS = "config.json", "model.safetensors"


def save(model, out_dir: str, dtype: str, config: dict) -> None:
    """The state dict, its floating tensors in ``dtype`` (the model is cast to it; the rest as they are), each tensor
    that two names share stored once (OpenFold3's sampler holds its diffusion module a second time), and ``config``."""
    import torch
    from safetensors.torch import save_model

    os.makedirs(out_dir, exist_ok=True)
    save_model(model.to(getattr(torch, dtype)), os.path.join(out_dir, WEIGHTS), metadata={"format": "pt"})
    with open(os.path.join(out_dir, CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)


def seeded(build, seed: int, device: str | None = None):
    """The model ``build()`` makes under ``seed`` (the library's own seeded init; on ``device`` if given), its
    constant parameters spread (``fk_adapters.weights``' rule)."""
    import contextlib

    import torch

    from fk_adapters.weights import spread_constants

    torch.manual_seed(seed)
    with torch.device(device) if device else contextlib.nullcontext():
        model = build()
    spread_constants(model, seed)
    return model


def seeded_save(build, out_dir: str, seed: int, dtype: str, config: dict, device: str | None = None) -> None:
    """``seeded``'s model, saved with ``config``."""
    save(seeded(build, seed, device), out_dir, dtype, config)


def config(folder: str) -> dict:
    with open(os.path.join(folder, CONFIG), encoding="utf-8") as f:
        return json.load(f)


def load_into(model, folder: str):
    """``model`` with the saved state dict loaded into it (a shared tensor from its one stored name); a name missing
    or left over is an error."""
    from safetensors.torch import load_model

    load_model(model, os.path.join(folder, WEIGHTS))
    return model


def images(spec: dict, b: int, seed: int, device, dtype, uniform: bool = False) -> dict:
    """Seeded images {"x": [b, channels, image_size, image_size]} (drawn on the CPU: the same on every device),
    normal, or ``uniform`` in [0, 1) (pixels as a detector's preprocessing gives them)."""
    import torch

    s, c = int(spec["image_size"]), int(spec.get("channels", 3))
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(b, c, s, s, generator=gen) if uniform else torch.randn(b, c, s, s, generator=gen)
    return {"x": x.to(device=device, dtype=dtype)}
