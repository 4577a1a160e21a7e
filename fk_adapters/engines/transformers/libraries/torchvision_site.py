"""torchvision for the libraries that import it (timm, ultralytics), importable on this CPU machine too.

The registry's torchvision is a CUDA build: against this machine's CPU torch its C++ library does not load, and its
import fails on registering its two NMS ops' shapes (``operator torchvision::nms does not exist``). In site-packages
that failure would break transformers' imports in every engine, so ``make setup`` installs torchvision and the
libraries that need it into a folder of their own (``<venv>/torchvision-site``, or ``$FK_TORCHVISION_SITE``), which
only their loaders put on the path; where torchvision's import still fails on those two ops, ``importable`` declares
them (a schema, no kernel: a call raises; no model fk hosts calls NMS) and imports it again. On the GPU machine the
CUDA build loads as it is.
"""
from __future__ import annotations

import os
import sys

ENV = "FK_TORCHVISION_SITE"
_NMS_OPS = ("nms", "qnms")  # torchvision registers their fake kernels at import, unguarded by its ops' presence
_declared: list = []  # the torch.library.Library declaring them (kept alive: the declarations live with it)


def folder() -> str:
    return os.environ.get(ENV) or os.path.join(sys.prefix, "torchvision-site")


def importable():
    """torchvision, imported (the site folder after the environment's own packages on the path)."""
    site = folder()
    if os.path.isdir(site) and site not in sys.path:
        sys.path.append(site)
    try:
        import torchvision
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc):
            raise
        _declare_nms_ops()
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        import torchvision
    return torchvision


def _declare_nms_ops() -> None:
    import torch

    lib = torch.library.Library("torchvision", "DEF")
    for op in _NMS_OPS:
        lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _declared.append(lib)
