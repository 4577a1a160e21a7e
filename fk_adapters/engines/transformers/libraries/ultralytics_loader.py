"""ultralytics detection models in the transformers host: ``[model] library = "ultralytics"``, ``class`` (a model
definition ultralytics ships, e.g. ``yolov10n.yaml``) and ``nc`` (classes).

The checkpoint is the state dict beside the definition and class count (``state_dict``), loaded back into the
``DetectionModel`` ultralytics builds from that definition, then fused as its predictor serves it
(each convolution's batch norm folded into it). Weights follow ``fk_adapters.weights``' rule: the model's own seeded
init, then every constant parameter spread. One item is one image's detections as the model's forward returns them
(YOLOv10: the one-to-one head's boxes and class scores per anchor; no NMS). ultralytics imports torchvision:
``side_site`` makes it importable.
"""
from __future__ import annotations

import os
import types

from fk_adapters.engines.transformers.libraries import LibraryError, side_site, state_dict

FK_KEYS = ("library", "class")


def _ultralytics():
    side_site.import_torchvision()
    os.environ.setdefault("YOLO_OFFLINE", "1")  # no update or asset checks: nothing is downloaded
    import ultralytics

    return ultralytics


def version() -> str:
    return _ultralytics().__version__


def _build(definition: str, nc: int):
    _ultralytics()
    from ultralytics.nn.tasks import DetectionModel

    try:
        return DetectionModel(definition, nc=nc, verbose=False)
    except FileNotFoundError as exc:
        raise LibraryError(f"ultralytics ships no model definition {definition!r}") from exc


def build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    """Build the model from its definition (seeded), spread its constant parameters, save its state dict."""
    nc = int(config.get("nc", 80))
    state_dict.seeded_save(lambda: _build(config["class"], nc), out_dir, seed, dtype,
                           {"library": "ultralytics", "class": config["class"], "nc": nc})


def load(job: dict, device: str):
    """The model built from the checkpoint's definition with its state dict, fused, in the job's dtype."""
    import torch

    cfg = state_dict.config(job["model_dir"])
    model = state_dict.load_into(_build(cfg["class"], cfg["nc"]), job["model_dir"]).fuse(verbose=False).eval()
    model.config = types.SimpleNamespace(**cfg)  # what the host reads of a model's config
    return model.to(device=device, dtype=getattr(torch, job["dtype"]))


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """Seeded images [b, channels, image_size, image_size], pixels in [0, 1)."""
    return state_dict.images(spec, b, seed, device, dtype, uniform=True)
