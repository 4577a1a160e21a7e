"""timm models in the transformers host: ``[model] library = "timm"``, ``class`` (a timm model name, as
``timm.create_model`` takes it) and its keyword arguments (``num_classes``, ...).

The checkpoint is ``config.json`` (the name and arguments) and ``model.safetensors`` (the state dict), loaded back
into ``timm.create_model``'s model. Weights follow ``fk_adapters.weights``' rule: timm's own seeded init, then every
constant parameter spread.

timm imports torchvision (its ops module, for a frozen batch norm class). Where torchvision's C++ library does not
match torch (the registry's torchvision is a CUDA build; this CPU machine's torch is not), torchvision's import
fails on registering its two NMS ops' shapes; ``import_timm`` then declares those two ops (no kernel: a call raises,
and no model fk hosts calls them) and imports it again. On this CPU machine ``make setup`` installs timm and
torchvision into a folder of their own (``<venv>/timm-site``, or ``$FK_TIMM_SITE``), which only this loader puts
on the path: in site-packages that torchvision would break transformers' imports in every engine.
"""
from __future__ import annotations

import json
import os
import sys
import types

from fk_adapters.engines.transformers.libraries import LibraryError

FK_KEYS = ("library", "class")
_NMS_OPS = ("nms", "qnms")  # torchvision registers their fake kernels at import, unguarded by its ops' presence
_declared: list = []  # the torch.library.Library declaring them (kept alive: the declarations live with it)


def import_timm():
    site = os.environ.get("FK_TIMM_SITE") or os.path.join(sys.prefix, "timm-site")
    if os.path.isdir(site) and site not in sys.path:
        sys.path.append(site)  # after the environment's own packages
    try:
        import torchvision  # noqa: F401
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc):
            raise
        _declare_nms_ops()
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        import torchvision  # noqa: F401
    import timm

    return timm


def _declare_nms_ops() -> None:
    import torch

    lib = torch.library.Library("torchvision", "DEF")
    for op in _NMS_OPS:
        lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _declared.append(lib)


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
