"""The side site: the transformers host's libraries that must stay out of the environment's site-packages.

``make setup`` installs them (``side-site.txt`` beside this module, all ``--no-deps``) into ``<venv>/side-site`` (or
``$FK_SIDE_SITE``), which only their loaders put on the path, after the environment's own packages: torchvision and
what imports it (timm, ultralytics, ocnn), and the libraries whose import chains would otherwise pull packages into
every engine's environment (gsplat, nerfstudio, lerobot, openfold3, torch-pointcloud and spconv, torchrec and
fbgemm-gpu-cpu).

The registry's torchvision is a CUDA build: against this machine's CPU torch its C++ library does not load, and its
import fails on registering its two NMS ops' shapes (``operator torchvision::nms does not exist``). In site-packages
that failure would break transformers' imports in every engine. Where its import fails on those two ops,
``import_torchvision`` declares them (a schema, no kernel: a call raises; no model fk hosts calls NMS) and imports it
again. On the GPU machine the CUDA build loads as it is.
"""
from __future__ import annotations

import os
import sys

ENV = "FK_SIDE_SITE"
_NMS_OPS = ("nms", "qnms")  # torchvision registers their fake kernels at import, unguarded by its ops' presence
_declared: list = []  # the torch.library.Library declaring them (kept alive: the declarations live with it)


def folder() -> str:
    return os.environ.get(ENV) or os.path.join(sys.prefix, "side-site")


def installed(package: str) -> bool:
    """Whether ``package`` imports from the environment or the side site (looked up, not imported)."""
    import importlib.util

    return importlib.util.find_spec(package) is not None or os.path.isdir(os.path.join(folder(), package))


def on_path() -> None:
    """The side site on the path, after the environment's own packages. A torchvision it holds is imported at once
    (``import_torchvision``): any later import of it in this process (transformers' image utilities, which every
    model class of transformers imports) then finds it loaded instead of failing (fk's own process, where a side-site
    library's seeded weights were written, once wrote no transformers model after it)."""
    site = folder()
    if os.path.isdir(site) and site not in sys.path:
        sys.path.append(site)
        if "torchvision" not in sys.modules and os.path.isdir(os.path.join(site, "torchvision")):
            import_torchvision()


def import_torchvision():
    """torchvision, imported from the environment or the side site."""
    on_path()
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
