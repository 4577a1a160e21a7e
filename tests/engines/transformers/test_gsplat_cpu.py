"""gsplat's 3D Gaussian Splatting in the transformers host on CPU (tiny-3dgs): `fk run` loads the seeded scene,
renders a view with gsplat's pure-torch projection and SH and the loader's tile compositor, diffs the image bit for
bit, and says that no slot applies (no Linear, Conv, norm or attention: NOT_APPLICABLE, so no fk-wrong plugin can
fail it). The compositor, fk's own code, is checked against a pixel-by-pixel transcription of gsplat's CUDA
rasterize-to-pixels kernel. Marked `engine`."""
import importlib.util
import sys

import pytest

from fk_adapters.engines.transformers.libraries import side_site
from tests.engines.transformers.test_transformers_cpu import fk

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None or not side_site.installed("gsplat"),
                                 reason="transformers or gsplat is not installed")]


def test_the_rendered_view_is_diffed_bit_for_bit_and_no_slot_claims_it(tmp_path):
    p, res, _ = fk(tmp_path, "run", "--plugins", "passthrough", "--scenario", "tiny-3dgs", "--correctness-only",
                   "--allow-uncovered", env={"OMP_NUM_THREADS": "1"})  # one thread a process, both sides alike
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["scenario"] == "tiny-3dgs" and row["status"] == "NOT_APPLICABLE", row.get("failures")
    c = row["correctness"]
    assert c["passed"] and c["worst"]["max_abs"] == 0.0
    assert c["outputs"]["colors"]["shape"] == [1, 48, 64, 3] and c["outputs"]["alphas"]["shape"] == [1, 48, 64, 1]
    assert {v["status"] for v in row["evidence"]["slots"].values()} == {"n/a"}  # no slot exercised


def test_the_tile_compositor_follows_gsplats_kernel_pixel_by_pixel(tmp_path):
    import torch

    from fk_adapters.engines.transformers.libraries import gsplat_loader as L

    cfg = {"library": "gsplat", "class": "rasterization", "num_gaussians": 600, "image_width": 40,
           "image_height": 24, "tile_size": 16}
    L.build_and_save(cfg, str(tmp_path), 7, "float32", "cpu")
    model = L.load({"model_dir": str(tmp_path), "dtype": "float32"}, "cpu")
    x = L.batch(model, {"fov_degrees": 60.0, "camera_radius": 1.0}, 2, 7, "cpu", torch.float32)
    with torch.inference_mode():
        out = model(**x)
        again = model(**x)
    assert model.config.rasterizer == L.TORCH_PATH
    assert torch.equal(out["colors"], again["colors"]) and bool((out["alphas"] > 0).all())

    from gsplat.cuda._torch_impl import _fully_fused_projection, _quat_scale_to_covar_preci, _spherical_harmonics

    with torch.no_grad():
        m, ts = model, 16
        covars, _ = _quat_scale_to_covar_preci(m.quats, m.scales.exp(), True, False, triu=False)
        radii, xy, depths, conics, _ = _fully_fused_projection(m.means, covars, x["viewmats"], x["Ks"], 40, 24)
        campos = torch.inverse(x["viewmats"])[:, :3, 3]
        shs = torch.cat([m.sh0, m.shN], 1)
        rgb = _spherical_harmonics(3, m.means[None] - campos[:, None], shs[None].expand(2, *shs.shape))
        rgb, op = (rgb + 0.5).clamp_min(0), torch.sigmoid(m.opacities)
        for b in range(2):
            lo, hi = torch.floor((xy[b] - radii[b]) / ts), torch.ceil((xy[b] + radii[b]) / ts)
            for py, px in [(0, 0), (7, 20), (23, 39), (16, 33), (12, 5)]:
                tx, ty = px // ts, py // ts
                hit = ((radii[b] > 0).all(-1) & (lo[:, 0].clamp(0, 3) <= tx) & (hi[:, 0].clamp(0, 3) > tx)
                       & (lo[:, 1].clamp(0, 2) <= ty) & (hi[:, 1].clamp(0, 2) > ty))
                ids = torch.nonzero(hit).squeeze(1)
                T, acc = 1.0, torch.zeros(3)
                for g in ids[torch.sort(depths[b, ids], stable=True).indices].tolist():
                    d = xy[b, g] - torch.tensor([px + 0.5, py + 0.5])
                    cn = conics[b, g]
                    sigma = float(0.5 * (cn[0] * d[0] ** 2 + cn[2] * d[1] ** 2) + cn[1] * d[0] * d[1])
                    alpha = min(0.999, float(op[g]) * float(torch.exp(torch.tensor(-sigma))))
                    if sigma < 0 or alpha < 1 / 255:
                        continue
                    if T * (1 - alpha) <= 1e-4:
                        break
                    acc += rgb[b, g] * alpha * T
                    T *= 1 - alpha
                assert torch.allclose(out["colors"][b, py, px], acc, atol=1e-5), (b, py, px)
                assert abs(float(out["alphas"][b, py, px, 0]) - (1 - T)) < 1e-5, (b, py, px)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_the_init_scales_are_the_exact_nearest_neighbour_distances():
    import torch

    from fk_adapters.engines.transformers.libraries.gsplat_loader import _knn_mean_dist

    points = torch.rand((3000, 3), generator=torch.Generator().manual_seed(0)) * 6 - 3
    d = torch.cdist(points, points, compute_mode="donot_use_mm_for_euclid_dist")
    near = torch.topk(d, 4, dim=1, largest=False).values[:, 1:]
    torch.testing.assert_close(_knn_mean_dist(points), torch.sqrt((near ** 2).mean(dim=-1)), rtol=1e-6, atol=0)
