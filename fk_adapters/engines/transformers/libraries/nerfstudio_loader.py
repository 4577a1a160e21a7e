"""nerfstudio's Instant-NGP field in the transformers host: ``[model] library = "nerfstudio"``, ``class =
"NerfactoField"`` (the field nerfstudio's ``instant-ngp`` method builds), that class's constructor arguments (hash
grid: ``num_levels``, ``features_per_level``, ``log2_hashmap_size``, ``base_res``, ``max_res``; density MLP:
``num_layers``, ``hidden_dim``, ``geo_feat_dim``; colour MLP: ``num_layers_color``, ``hidden_dim_color``;
``appearance_embedding_dim``, ``num_images``) and ``aabb_scale`` (the scene box: a cube of that side about the
origin, as instant-ngp's ``aabb_scale``).

The hash grid is nerfstudio's pure-PyTorch ``HashEncoding`` (``implementation="torch"``: eight hashed corner
lookups per level, trilinear blend in torch ops), and its MLPs are ``nn.Linear`` stacks: tiny-cuda-nn's fused
hash-encoding and fully fused MLP kernels are not used (nor installable here). One item is one ray, rendered as
nerfstudio renders a dense batch of rays: ``AABBBoxCollider`` (near and far on the scene box), ``UniformSampler``
(``samples_per_ray`` evenly spaced samples, no jitter in eval), the field (density from the hash-grid MLP, colour
from the SH-4 direction encoding and the geometry features), ``RayBundle``'s alpha-compositing weights and the RGB,
accumulation and expected-depth renderers. instant-ngp and nerfstudio's ``NGPModel`` skip empty space with an
occupancy grid (nerfacc's CUDA sampler); fk samples every ray uniformly instead, so every sample is evaluated.

Precision follows tiny-cuda-nn's: ray geometry (origins, directions, sample positions) stays float32 and the field
casts its outputs back to it (nerfstudio's own ``.to(positions)``); the hash table and MLPs hold the job's dtype, and
a forward pre-hook on each nerfstudio ``MLP`` casts its input (the encodings, float32 by type promotion) to that
dtype, as tiny-cuda-nn's network does. That hook and the render wrapper (``NGPRender``) are fk's; everything they
call is nerfstudio's.

The checkpoint is the field's seeded ``state_dict`` beside its arguments (``state_dict``); weights follow
``fk_adapters.weights``' rule: nerfstudio's own init (hash table uniform in [-1e-3, 1e-3], ``nn.Linear``'s
default), then every constant parameter spread. No scene is trained or downloaded: the field is untrained.
"""
from __future__ import annotations

import warnings

from fk_adapters.engines.transformers.libraries import LibraryError, side_site, state_dict

FK_KEYS = ("library", "class", "aabb_scale")  # fk's, not the class's
CLASSES = ("NerfactoField",)
BACKGROUND = "random"  # NGPModel's default: in eval, colour composited over black, unblended


def _import():
    # nothing here imports torchvision: the side site without import_torchvision's import of it (seconds on a CPU)
    side_site.on_path()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nerfstudio's torch.cuda.amp decorators are deprecated in this torch
        import nerfstudio.fields.nerfacto_field  # noqa: F401
        import nerfstudio.model_components.ray_samplers  # noqa: F401
        import nerfstudio.model_components.renderers  # noqa: F401
        import nerfstudio.model_components.scene_colliders  # noqa: F401
    import nerfstudio

    return nerfstudio


def version() -> str:
    from importlib.metadata import version as dist_version

    _import()
    return dist_version("nerfstudio")


def class_args(config: dict) -> dict:
    """A [model] table without fk's keys: the field class's constructor arguments."""
    return {k: v for k, v in config.items() if k not in FK_KEYS}


def _aabb(scale: float):
    import torch

    half = float(scale) / 2
    return torch.tensor([[-half] * 3, [half] * 3], dtype=torch.float32)


def _build(config: dict):
    _import()
    from nerfstudio.fields.nerfacto_field import NerfactoField

    if config["class"] not in CLASSES:
        raise LibraryError(f"fk serves nerfstudio's {', '.join(CLASSES)}, not {config['class']!r}")
    args = dict(class_args(config), implementation="torch")  # tiny-cuda-nn is not used even where installed
    args.setdefault("num_images", 1)
    return NerfactoField(aabb=_aabb(config.get("aabb_scale", 1.0)), **args)


def build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    """nerfstudio's own seeded init of the field, constants spread, saved with its arguments."""
    state_dict.seeded_save(lambda: _build(config), out_dir, seed, dtype, dict(config))


def load(job: dict, device: str):
    """The field built from the checkpoint's arguments with its state dict, in the job's dtype, inside the renderer
    module whose call renders a batch of rays."""
    import torch

    config = state_dict.config(job["model_dir"])
    field = state_dict.load_into(_build(config), job["model_dir"])
    field = field.to(device=device, dtype=getattr(torch, job["dtype"])).eval()
    return _render(field, config, job.get("inputs", {}), device).eval()


def _cast_to_weights(mlp, args):
    """tiny-cuda-nn's MLPs take their input in their own precision: the encodings, cast to the weights' dtype."""
    x, *rest = args
    return (x.to(mlp.layers[0].weight.dtype), *rest)


def _render(field, config: dict, spec: dict, device):
    import types

    import torch
    from nerfstudio.cameras.rays import RayBundle
    from nerfstudio.data.scene_box import SceneBox
    from nerfstudio.field_components.field_heads import FieldHeadNames
    from nerfstudio.field_components.mlp import MLP
    from nerfstudio.model_components.ray_samplers import UniformSampler
    from nerfstudio.model_components.renderers import AccumulationRenderer, DepthRenderer, RGBRenderer
    from nerfstudio.model_components.scene_colliders import AABBBoxCollider

    for m in field.modules():
        if isinstance(m, MLP):
            m.register_forward_pre_hook(_cast_to_weights)

    class NGPRender(torch.nn.Module):
        """A batch of rays rendered through the field (a submodule: the host routes slots into its MLPs):
        {"rgb": [b, 3], "accumulation": [b], "depth": [b]}, float32."""

        def __init__(self):
            super().__init__()
            self.field = field
            self.config = types.SimpleNamespace(**config)  # what the host reads of a model's config
            self.collider = AABBBoxCollider(SceneBox(aabb=_aabb(config.get("aabb_scale", 1.0)).to(device)))
            self.sampler = UniformSampler(num_samples=int(spec.get("samples_per_ray", 64)))
            self.renderer_rgb = RGBRenderer(background_color=BACKGROUND)
            self.renderer_accumulation = AccumulationRenderer()
            self.renderer_depth = DepthRenderer(method="expected")

        def forward(self, origins, directions):
            n = origins.shape[0]
            bundle = RayBundle(origins=origins, directions=directions,
                               pixel_area=torch.ones(n, 1, device=origins.device),
                               camera_indices=torch.zeros(n, 1, dtype=torch.long, device=origins.device))
            samples = self.sampler(self.collider(bundle))
            out = self.field(samples)
            weights = samples.get_weights(out[FieldHeadNames.DENSITY])
            return {"rgb": self.renderer_rgb(rgb=out[FieldHeadNames.RGB], weights=weights),
                    "accumulation": self.renderer_accumulation(weights=weights)[..., 0],
                    "depth": self.renderer_depth(weights=weights, ray_samples=samples)[..., 0]}

    return NGPRender()


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """``b`` seeded rays, float32 whatever the job's dtype (ray geometry stays float32, as in instant-ngp): origins
    on a sphere of radius ``camera_radius`` about the scene's centre, directions towards the centre with
    ``direction_noise`` (normal, per component) added, normalised."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    radius, noise = float(spec.get("camera_radius", 1.0)), float(spec.get("direction_noise", 0.1))
    origins = radius * torch.nn.functional.normalize(torch.randn(b, 3, generator=gen), dim=-1)
    directions = torch.nn.functional.normalize(-origins / radius + noise * torch.randn(b, 3, generator=gen), dim=-1)
    return {"origins": origins.to(device), "directions": directions.to(device)}
