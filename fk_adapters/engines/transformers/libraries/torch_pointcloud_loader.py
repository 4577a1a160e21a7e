"""torch-pointcloud's point cloud models in the transformers host: ``[model] library = "torch_pointcloud"``, ``class``
(a model name of its registry, as ``torch_pointcloud.models.create_model`` takes it, e.g.
``ptv3-base.scannet20.pointcept``: Point Transformer V3, PT-v3m1 base, ported from Pointcept) and keyword arguments
that override the registered ones (``encoder_channels``, ``use_flash_attn``, ...).

The checkpoint is the state dict beside the name and arguments (``state_dict``), loaded back into the model
``create_model`` builds (``pretrained=False``: nothing is downloaded). Weights follow ``fk_adapters.weights``' rule:
the model's own seeded init, then every constant parameter spread.

One item is one scene: ``[inputs] points_per_scene`` voxels of a seeded room (floor and four walls, each occupied
voxel of ``grid_size`` drawn from the seed), ``channels`` seeded features per point (colour and normal in ScanNet);
a batch of ``b`` is ``b`` scenes concatenated with their batch index, as torch-pointcloud's collate gives them. The
call returns the per-point class logits [b * points_per_scene, num_classes]. PTv3 shuffles its serialization orders
at every forward (``torch.randperm``); the call draws that shuffle from the scenario's seed, so every run serializes
alike and the global random state is left as it was.

Its sparse convolutions are spconv's (``SubMConv3d``, no fk slot). spconv's CPU build cannot fuse a convolution's
bias in inference (``cpu don't support act and bias``): on a CPU tensor they take spconv's training path, which adds
the same bias after the gather-GEMM-scatter (no dropout or norm depends on it). With more than one thread its CPU
convolution gives different sums from one call to the next (seen on tiny-pointtransformerv3 with 2 threads: 0.087
largest difference between two calls of one process; none with 1), so on a CPU each runs on one thread. ocnn
(z-order codes) imports torchvision: ``side_site`` makes it importable, and torch-pointcloud, spconv and ocnn are
installed in that side site.
"""
from __future__ import annotations

import math
import types

from fk_adapters.engines.transformers.libraries import LibraryError, side_site, state_dict

FK_KEYS = ("library", "class")


def import_torch_pointcloud():
    side_site.import_torchvision()  # puts the side site on the path; ocnn's models import torchvision
    import torch_pointcloud

    return torch_pointcloud


def version() -> str:
    return import_torch_pointcloud().__version__


def class_config(table: dict) -> dict:
    """A [model] table without fk's keys: ``create_model``'s keyword arguments."""
    return {k: v for k, v in table.items() if k not in FK_KEYS}


def _create(name: str, kwargs: dict):
    tp = import_torch_pointcloud()
    from torch_pointcloud.models import create_model, list_models

    if name not in list_models():
        raise LibraryError(f"torch_pointcloud {tp.__version__} has no model {name!r}")
    if kwargs.get("use_flash_attn", True):
        try:
            import flash_attn  # noqa: F401
        except ImportError as exc:
            raise LibraryError(f"{name} with use_flash_attn needs flash_attn, which is not installed: "
                               "set use_flash_attn = false in [model]") from exc
    return create_model(name, pretrained=False, **kwargs)


def build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    """Build the model (seeded), spread its constant parameters, save its state dict and how to build it."""
    state_dict.seeded_save(lambda: _create(config["class"], class_config(config)), out_dir, seed, dtype,
                           {"library": "torch_pointcloud", "class": config["class"], "kwargs": class_config(config),
                            "seed": seed})


def load(job: dict, device: str):
    """The model built from the checkpoint's name and arguments with its state dict, in the job's dtype."""
    import torch

    cfg = state_dict.config(job["model_dir"])
    model = state_dict.load_into(_create(cfg["class"], cfg["kwargs"]), job["model_dir"])
    model = model.to(device=device, dtype=getattr(torch, job["dtype"])).eval()
    _spconv_on_cpu(model)
    return _scenes(model, cfg)


def _spconv_on_cpu(model) -> None:
    """Each spconv convolution given a CPU tensor runs spconv's training path (bias added after, not fused), on one
    thread (the others' count restored after it)."""
    import spconv.pytorch as spconv
    import torch

    threads: list[int] = []

    def before(module, args):
        on_cpu = not args[0].features.is_cuda
        module.training = on_cpu
        if on_cpu:
            threads.append(torch.get_num_threads())
            torch.set_num_threads(1)

    def after(module, args, out):
        if threads:
            torch.set_num_threads(threads.pop())

    for m in model.modules():
        if isinstance(m, spconv.conv.SparseConvolution):
            m.register_forward_pre_hook(before)
            m.register_forward_hook(after)


def _scenes(model, cfg: dict):
    """One call = one forward of the segmentation model over the batch's scenes (a module, the library's model its
    submodule: the host routes slots into it); the serialization-order shuffle drawn from the scenario's seed."""
    import torch

    class PointCloudScenes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.seed = model, int(cfg.get("seed", 0))
            self.config = types.SimpleNamespace(**cfg)  # what the host reads of a model's config

        def forward(self, x, pos_grid, batch):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                return self.model(x, pos_grid, batch)

    return PointCloudScenes()


def room(points: int, seed: int):
    """[points, 3] distinct voxel coordinates (int64) of a seeded room: floor and four walls (height half the
    side), the side chosen so that the scene occupies about 80% of those surface voxels."""
    import torch

    side = max(4, math.ceil(math.sqrt(points / (3 * 0.8))))
    height = max(2, side // 2)
    r = torch.arange(side)
    h = torch.arange(1, height)
    a, b = torch.meshgrid(r, r, indexing="ij")
    floor = torch.stack([a.reshape(-1), b.reshape(-1), torch.zeros(a.numel(), dtype=torch.long)], 1)
    w, z = torch.meshgrid(r, h, indexing="ij")
    w, z = w.reshape(-1), z.reshape(-1)
    zero, top = torch.zeros_like(w), torch.full_like(w, side - 1)
    walls = [torch.stack(c, 1) for c in ((w, zero, z), (w, top, z), (zero, w, z), (top, w, z))]
    surface = torch.unique(torch.cat([floor, *walls]), dim=0)
    if points > len(surface):
        raise LibraryError(f"a room of {len(surface)} voxels cannot hold {points} points")
    gen = torch.Generator().manual_seed(seed)
    return surface[torch.randperm(len(surface), generator=gen)[:points]]


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """``b`` seeded scenes of ``points_per_scene`` voxels each (drawn on the CPU: the same on every device):
    ``x`` [b * n, channels] features, ``pos_grid`` [b * n, 3] voxel coordinates, ``batch`` [b * n] scene index."""
    import torch

    n, c = int(spec["points_per_scene"]), int(spec.get("channels", 6))
    grids = [room(n, seed + i) for i in range(b)]
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b * n, c, generator=gen)
    index = torch.arange(b).repeat_interleave(n)
    return {"x": x.to(device=device, dtype=dtype), "pos_grid": torch.cat(grids).to(device),
            "batch": index.to(device)}
