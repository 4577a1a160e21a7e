"""gsplat's 3D Gaussian Splatting in the transformers host: ``[model] library = "gsplat"``, ``class =
"rasterization"`` (the gsplat call the model makes), the scene's size (``num_gaussians``, ``sh_degree``), the render
size (``image_width``, ``image_height``, ``tile_size``) and the random init's ``init_extent`` / ``init_opacity``.

The model is a scene: one module holding the splats as gsplat's trainer keeps them (``means``, ``quats``, log
``scales``, logit ``opacities``, SH coefficients ``sh0`` [N, 1, 3] and ``shN`` [N, K-1, 3]) as parameters; one call
renders one batch of views (``viewmats`` [B, 4, 4] world-to-camera, ``Ks`` [B, 3, 3]) to ``colors`` [B, H, W, 3] and
``alphas`` [B, H, W, 1]. No trained scene can be downloaded: the splats follow ``examples/simple_trainer.py``'s
``init_type = "random"`` (means uniform in a cube of ``init_extent``, colours uniform, scales the log of the mean
distance to the 3 nearest neighbours, quaternions uniform, opacity ``init_opacity``), then ``spread_constants``
(the opacities) and fk's spread of ``shN`` (zero at that init, so SH bands 1..3 would count for nothing).

Which rasteriser runs (``model.config.rasterizer``): on a CUDA device ``gsplat.rendering.rasterization`` (gsplat's
CUDA kernels, JIT-built on first use) when its extension loads, else the torch path; on a CPU always the torch path:
gsplat's own pure-PyTorch projection (``_quat_scale_to_covar_preci``, ``_fully_fused_projection``) and SH
evaluation (``_spherical_harmonics``) from ``gsplat/cuda/_torch_impl.py``, then tile intersection and front-to-back
alpha compositing written here (``_composite``) with the CUDA kernel's rules (tiles of ``tile_size``, depth order per
tile, alpha capped at 0.999 and skipped below 1/255, a pixel done once its transmittance would fall to 1e-4): gsplat's
own torch compositor (``_rasterize_to_pixels``) calls its CUDA ``rasterize_to_indices_in_range`` and nerfacc, and its
torch tile intersection loops in Python over every Gaussian. No catalog slot applies (no Linear, Conv, norm or
attention): the run diffs the rendered images and exercises none.
"""
from __future__ import annotations

import math
import sys
import types

from fk_adapters.engines.transformers.libraries import LibraryError, side_site, state_dict

CLASSES = ("rasterization",)
ALPHA_MIN, ALPHA_MAX, T_MIN = 1.0 / 255.0, 0.999, 1e-4  # gsplat's rasterize_to_pixels kernel's thresholds
_DEFAULTS = {"sh_degree": 3, "tile_size": 16, "init_extent": 3.0, "init_opacity": 0.1, "rasterizer": "auto",
             "near_plane": 0.01, "far_plane": 1e10, "eps2d": 0.3}


def import_gsplat():
    """gsplat, from the side site fk's loaders put on the path (it needs no torchvision)."""
    side_site.on_path()
    import gsplat

    return gsplat


def version() -> str:
    return import_gsplat().__version__


def _config(table: dict) -> dict:
    cfg = dict(_DEFAULTS)
    cfg.update({k: v for k, v in table.items() if k != "library"})
    if cfg.get("class") not in CLASSES:
        raise LibraryError(f"fk serves gsplat's {', '.join(CLASSES)} only, not {cfg.get('class')!r}")
    if cfg["rasterizer"] not in ("auto", "torch", "cuda"):
        raise LibraryError(f"[model] rasterizer must be auto, torch or cuda, not {cfg['rasterizer']!r}")
    for key in ("num_gaussians", "image_width", "image_height"):
        if not isinstance(cfg.get(key), int) or cfg[key] < 1:
            raise LibraryError(f"[model] {key} must be a positive integer")
    return cfg


def _scene_class():
    import torch
    from torch import nn

    class GaussianScene(nn.Module):
        """The splats as parameters; ``forward`` renders a batch of views with gsplat."""

        def __init__(self, cfg: dict):
            super().__init__()
            n, k = cfg["num_gaussians"], (cfg["sh_degree"] + 1) ** 2
            self.means = nn.Parameter(torch.zeros(n, 3))
            self.quats = nn.Parameter(torch.zeros(n, 4))
            self.scales = nn.Parameter(torch.zeros(n, 3))  # log
            self.opacities = nn.Parameter(torch.zeros(n))  # logit
            self.sh0 = nn.Parameter(torch.zeros(n, 1, 3))
            self.shN = nn.Parameter(torch.zeros(n, k - 1, 3))
            self.config = types.SimpleNamespace(**cfg)  # what the host reads of a model's config
            self.config.requested, self.config.rasterizer = cfg["rasterizer"], None  # chosen on its device

        def forward(self, viewmats, Ks):
            c = self.config
            if c.rasterizer is None:  # a scene built outside ``load``
                c.rasterizer = _choose(c.requested, self.means.device)
            args = (self.means, self.quats, torch.exp(self.scales), torch.sigmoid(self.opacities),
                    torch.cat([self.sh0, self.shN], dim=1), viewmats, Ks)
            if c.rasterizer == CUDA_PATH:
                from gsplat.rendering import rasterization

                colors, alphas, _ = rasterization(*args, c.image_width, c.image_height, near_plane=c.near_plane,
                                                  far_plane=c.far_plane, eps2d=c.eps2d, sh_degree=c.sh_degree,
                                                  packed=False, tile_size=c.tile_size)
            else:
                colors, alphas = render_torch(*args, c)
            return {"colors": colors, "alphas": alphas}

    return GaussianScene


CUDA_PATH = "gsplat.rendering.rasterization (gsplat CUDA kernels)"
TORCH_PATH = "gsplat torch reference (_torch_impl projection + SH) and fk's tile compositor"


def _choose(requested: str, device) -> str:
    """gsplat's CUDA rasteriser where asked or allowed and its extension loads, else the torch path."""
    if requested == "torch" or device.type != "cuda":
        if requested == "cuda":
            raise LibraryError("[model] rasterizer = cuda needs a CUDA device")
        return _said(TORCH_PATH)
    try:
        from gsplat.cuda._backend import _C  # JIT-builds the extension on first use (minutes)
    except Exception as exc:  # noqa: BLE001 - any build failure falls back to the torch path
        _C, why = None, f"{type(exc).__name__}: {exc}"
    else:
        why = "no CUDA toolkit found"
    if _C is None:
        if requested == "cuda":
            raise LibraryError(f"gsplat's CUDA extension does not load: {why}")
        print(f"fk gsplat: CUDA extension unavailable ({why[:300]})", file=sys.stderr, flush=True)
        return _said(TORCH_PATH)
    return _said(CUDA_PATH)


def _said(path: str) -> str:
    print(f"fk gsplat: rasterising with {path}", file=sys.stderr, flush=True)
    return path


# ----------------------------------------------------------------------------- the torch path

def render_torch(means, quats, scales, opacities, shs, viewmats, Ks, c):
    """gsplat's ``_rasterization`` steps with its pure-torch projection and SH, then ``_composite``."""
    import torch
    from gsplat.cuda._torch_impl import _fully_fused_projection, _quat_scale_to_covar_preci, _spherical_harmonics

    B = viewmats.shape[0]
    covars, _ = _quat_scale_to_covar_preci(quats, scales, True, False, triu=False)
    radii, means2d, depths, conics, _ = _fully_fused_projection(
        means, covars, viewmats, Ks, c.image_width, c.image_height, eps2d=c.eps2d, near_plane=c.near_plane,
        far_plane=c.far_plane)
    campos = torch.inverse(viewmats)[:, :3, 3]  # [B, 3]
    dirs = means[None] - campos[:, None]  # [B, N, 3]
    colors = _spherical_harmonics(c.sh_degree, dirs, shs[None].expand(B, *shs.shape))  # [B, N, 3]
    colors = torch.clamp_min(colors + 0.5, 0.0)  # as gsplat's rasterization
    opac = opacities[None].expand(B, -1)
    return _composite(means2d, radii, depths, conics, colors, opac, c.image_width, c.image_height, c.tile_size)


def _intersections(means2d, radii, depths, ts: int, tw: int, th: int):
    """(flat Gaussian ids [M] in (image, tile, depth) order, tile offsets [B * th * tw], counts), the tiles each
    Gaussian's box touches as gsplat's ``_isect_tiles`` computes them, vectorised."""
    import torch

    B, N = depths.shape
    dev = depths.device
    tm, tr = means2d / ts, radii / ts
    lo, hi = torch.floor(tm - tr).long(), torch.ceil(tm + tr).long()
    lo[..., 0].clamp_(0, tw), lo[..., 1].clamp_(0, th)
    hi[..., 0].clamp_(0, tw), hi[..., 1].clamp_(0, th)
    span = hi - lo  # [B, N, 2]
    per = (span[..., 0] * span[..., 1] * (radii > 0).all(dim=-1)).reshape(-1)  # tiles per Gaussian
    gid = torch.repeat_interleave(torch.arange(B * N, device=dev), per)
    local = torch.arange(gid.numel(), device=dev) - (torch.cumsum(per, 0) - per)[gid]
    w = span[..., 0].reshape(-1)[gid]
    tx = lo[..., 0].reshape(-1)[gid] + local % w
    ty = lo[..., 1].reshape(-1)[gid] + torch.div(local, w, rounding_mode="floor")
    tile = torch.div(gid, N, rounding_mode="floor") * (th * tw) + ty * tw + tx
    order = torch.sort(depths.reshape(-1)[gid], stable=True).indices  # depth, ties by Gaussian (gsplat's radix sort)
    order = order[torch.sort(tile[order], stable=True).indices]
    counts = torch.bincount(tile[order], minlength=B * th * tw)
    return gid[order], torch.cumsum(counts, 0) - counts, counts


def _composite(means2d, radii, depths, conics, colors, opacities, width: int, height: int, ts: int):
    """Front-to-back alpha blending per tile, every tile at once, a chunk of each tile's Gaussians per step."""
    import torch

    B, N = depths.shape
    dev, dt = means2d.device, means2d.dtype
    tw, th = math.ceil(width / ts), math.ceil(height / ts)
    ids, offsets, counts = _intersections(means2d, radii, depths, ts, tw, th)
    xy, con = means2d.reshape(-1, 2), conics.reshape(-1, 3)
    op, col = opacities.reshape(-1), colors.reshape(B * N, -1)
    nt, P = B * th * tw, ts * ts
    t = torch.arange(nt, device=dev) % (th * tw)
    j = torch.arange(P, device=dev)
    px = ((t % tw)[:, None] * ts + j % ts).to(dt) + 0.5  # [nt, P]
    py = (torch.div(t, tw, rounding_mode="floor")[:, None] * ts + torch.div(j, ts, rounding_mode="floor")).to(dt) + 0.5
    out = torch.zeros(nt, P, col.shape[-1], device=dev, dtype=dt)
    T = torch.ones(nt, P, device=dev, dtype=dt)
    done = torch.zeros(nt, P, device=dev, dtype=torch.bool)
    budget = (1 << 26) if dev.type == "cuda" else (1 << 21)  # pixel x Gaussian pairs per step
    pos = 0
    while True:
        act = torch.nonzero((counts > pos) & ~done.all(dim=1)).squeeze(1)
        if act.numel() == 0:
            break
        K = max(8, min(1024, budget // (act.numel() * P)))
        idx = offsets[act, None] + pos + torch.arange(K, device=dev)  # [A, K]
        valid = idx < (offsets + counts)[act, None]
        g = ids[idx.clamp(max=max(ids.numel() - 1, 0))]
        dx = xy[g, 0][:, None, :] - px[act, :, None]  # [A, P, K]
        dy = xy[g, 1][:, None, :] - py[act, :, None]
        c3 = con[g]
        sigma = 0.5 * (c3[:, None, :, 0] * dx * dx + c3[:, None, :, 2] * dy * dy) + c3[:, None, :, 1] * dx * dy
        alpha = torch.clamp_max(op[g][:, None, :] * torch.exp(-sigma), ALPHA_MAX)
        alpha = torch.where((sigma < 0) | (alpha < ALPHA_MIN) | ~valid[:, None, :], 0.0, alpha)
        T0 = T[act]
        keep = (T0[..., None] * torch.cumprod(1 - alpha, dim=-1) > T_MIN) & ~done[act][..., None]
        a = torch.where(keep, alpha, 0.0)
        trans = torch.cumprod(1 - a, dim=-1)
        before = T0[..., None] * torch.cat([torch.ones_like(trans[..., :1]), trans[..., :-1]], dim=-1)
        out[act] += torch.einsum("apk,akc->apc", a * before, col[g])
        T[act] = T0 * trans[..., -1]
        done[act] |= (~keep & (alpha > 0)).any(dim=-1)
        pos += K
    C = out.shape[-1]
    img = out.reshape(B, th, tw, ts, ts, C).permute(0, 1, 3, 2, 4, 5).reshape(B, th * ts, tw * ts, C)
    acc = (1 - T).reshape(B, th, tw, ts, ts, 1).permute(0, 1, 3, 2, 4, 5).reshape(B, th * ts, tw * ts, 1)
    return img[:, :height, :width].contiguous(), acc[:, :height, :width].contiguous()


# ----------------------------------------------------------------------------- checkpoint, load, inputs

def _knn_mean_dist(points, k: int = 3):
    """The mean distance of each point to its ``k`` nearest others (simple_trainer's ``knn(points, 4)[:, 1:]``),
    exact, in row chunks."""
    import torch

    n = points.shape[0]
    rows = max(1, (1 << (28 if points.device.type == "cuda" else 24)) // n)
    out = torch.empty(n, device=points.device, dtype=points.dtype)
    cols = points.T.contiguous()
    for s in range(0, n, rows):
        # squared distances one coordinate at a time: elementwise passes (cdist's direct CUDA kernel runs a block
        # per pair: 20+ minutes for 1.1M points on an H100)
        d2 = (points[s:s + rows, 0:1] - cols[0]).square_()
        for c in range(1, points.shape[1]):
            d2 += (points[s:s + rows, c:c + 1] - cols[c]).square_()
        near2 = torch.topk(d2, k + 1, dim=1, largest=False).values[:, 1:]
        out[s:s + rows] = torch.sqrt(near2.mean(dim=-1))
    return out


def build_and_save(config: dict, out_dir: str, seed: int, dtype: str, device: str) -> None:
    """simple_trainer's random init (drawn on the CPU, the nearest neighbours found on ``device``), then the
    constants spread, saved with the config."""
    import torch

    from fk_adapters.weights import spread_constants

    cfg = _config(config)
    n, k = cfg["num_gaussians"], (cfg["sh_degree"] + 1) ** 2
    gen = torch.Generator().manual_seed(seed)
    points = cfg["init_extent"] * (torch.rand((n, 3), generator=gen) * 2 - 1)
    rgbs = torch.rand((n, 3), generator=gen)
    dist = _knn_mean_dist(points.to(device)).cpu()
    model = _scene_class()(cfg)
    with torch.no_grad():
        model.means.copy_(points)
        model.scales.copy_(torch.log(dist)[:, None].repeat(1, 3))
        model.quats.copy_(torch.rand((n, 4), generator=gen))
        model.opacities.fill_(math.log(cfg["init_opacity"] / (1 - cfg["init_opacity"])))
        model.sh0.copy_(((rgbs - 0.5) / 0.28209479177387814)[:, None])  # simple_trainer's rgb_to_sh
        model.shN.copy_(0.02 * torch.randn((n, k - 1, 3), generator=gen))  # fk: the init leaves shN zero
    spread_constants(model, seed)
    state_dict.save(model, out_dir, dtype, dict(cfg, library="gsplat"))


def load(job: dict, device: str):
    """The scene with its saved splats, in the job's dtype, its rasteriser chosen (and said on stderr)."""
    import torch

    import_gsplat()
    cfg = _config(state_dict.config(job["model_dir"]))
    model = state_dict.load_into(_scene_class()(cfg), job["model_dir"])
    model = model.to(device=device, dtype=getattr(torch, job["dtype"])).eval()
    model.config.rasterizer = _choose(cfg["rasterizer"], model.means.device)  # a JIT build happens here, not timed
    return model


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """``b`` seeded views: cameras on a sphere of ``camera_radius`` about the scene's centre, looking at it (OpenCV
    axes, z up), pinhole intrinsics of horizontal field of view ``fov_degrees`` at the model's render size."""
    import torch

    c = model.config
    gen = torch.Generator().manual_seed(seed)
    pos = torch.nn.functional.normalize(torch.randn(b, 3, generator=gen, dtype=torch.float64), dim=-1)
    pos = pos * float(spec.get("camera_radius", 1.0))
    fwd = torch.nn.functional.normalize(-pos, dim=-1)
    up = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64).expand(b, 3)
    right = torch.nn.functional.normalize(torch.linalg.cross(fwd, up), dim=-1)
    down = torch.linalg.cross(fwd, right)
    c2w = torch.eye(4, dtype=torch.float64).repeat(b, 1, 1)
    c2w[:, :3, :3] = torch.stack([right, down, fwd], dim=-1)
    c2w[:, :3, 3] = pos
    f = 0.5 * c.image_width / math.tan(math.radians(float(spec.get("fov_degrees", 60.0))) / 2)
    Ks = torch.tensor([[f, 0.0, c.image_width / 2], [0.0, f, c.image_height / 2], [0.0, 0.0, 1.0]],
                      dtype=torch.float64).expand(b, 3, 3)
    return {"viewmats": torch.linalg.inv(c2w).to(device=device, dtype=dtype),
            "Ks": Ks.contiguous().to(device=device, dtype=dtype)}
