"""timm models in the transformers host: ``[model] library = "timm"``, ``class`` (a timm model name, as
``timm.create_model`` takes it) and its keyword arguments (``num_classes``, ...).

The checkpoint is the state dict beside the name and arguments (``state_dict``), loaded back into
``timm.create_model``'s model. Weights follow ``fk_adapters.weights``' rule: timm's own seeded init, then every
constant parameter spread. The last BatchNorm weight of each residual branch starts at zero before the spread (as
timm's ``zero_init_last`` trains them), so spread to N(0, 0.1): with timm's init alone each branch doubled its
block's output, fk46-efficientnetv2's logits grew to about 1e7 and bf16 rounding moved them 105% (session 65);
with small branch weights, 0.4% (0.8% for MobileNetV4).

timm imports torchvision (its ops module, for a frozen batch norm class): ``side_site`` makes it importable.
"""
from __future__ import annotations

import types

from fk_adapters.engines.transformers.libraries import LibraryError, side_site, state_dict

FK_KEYS = ("library", "class")


def import_timm():
    side_site.import_torchvision()
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


def zero_residual_norms(model):
    """``model`` with the last BatchNorm weight of every block that adds its input back (``has_skip``) at zero."""
    import torch

    with torch.no_grad():
        for block in (m for m in model.modules() if getattr(m, "has_skip", False)):
            norms = [m for m in block.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
            if norms:
                norms[-1].weight.zero_()
    return model


def build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    """Build the model (seeded, its residual branches' last norm weights at zero), spread its constant parameters,
    save its state dict and how to build it."""
    state_dict.seeded_save(lambda: zero_residual_norms(_create(config["class"], class_config(config))), out_dir,
                           seed, dtype,
                           {"library": "timm", "class": config["class"], "kwargs": class_config(config)}, device)


def load(job: dict, device: str):
    """The model timm builds from the checkpoint's name and arguments, with its saved state dict, in the job's
    dtype."""
    import torch

    cfg = state_dict.config(job["model_dir"])
    model = state_dict.load_into(_create(cfg["class"], cfg["kwargs"]), job["model_dir"])
    model.config = types.SimpleNamespace(**cfg)  # what the host reads of a model's config
    return model.to(device=device, dtype=getattr(torch, job["dtype"])).eval()


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """Seeded images [b, channels, image_size, image_size]."""
    return state_dict.images(spec, b, seed, device, dtype)
