"""The libraries whose models the transformers host loads: ``[model] library`` names one; none means transformers.

transformers' own models take the host's first path (``driver.load_model``, ``inputs.py``, ``fk_adapters.weights``).
Every other library has a loader module here with ``version()``, ``build_and_save`` (its seeded checkpoint, called
by ``fk_adapters.weights``), ``load`` (the library's own ``from_pretrained``, wrapped so that one call of the model
is one item, e.g. a whole denoising loop) and ``batch`` (that call's seeded inputs).
"""
from __future__ import annotations

import importlib

DEFAULT = "transformers"
# library -> its loader module here
LOADERS = {"diffusers": "diffusers_loader", "gsplat": "gsplat_loader", "lerobot": "lerobot_loader",
           "nerfstudio": "nerfstudio_loader", "openfold3": "openfold3_loader", "timm": "timm_loader",
           "torch_geometric": "pyg_loader", "torch_pointcloud": "torch_pointcloud_loader",
           "torchrec": "torchrec_loader", "ultralytics": "ultralytics_loader"}
NAMES = (DEFAULT, *LOADERS)


class LibraryError(ValueError):
    """A library fk has no loader for."""


def of(model: dict) -> str:
    """The library a scenario's [model] table (or a job) names."""
    return model.get("library") or DEFAULT


def loader(name: str):
    """The loader module of a library other than transformers."""
    if name not in LOADERS:
        raise LibraryError(f"no loader for library {name!r} (known: {', '.join(LOADERS)})")
    return importlib.import_module(f"{__name__}.{LOADERS[name]}")
