"""DP3 (3D Diffusion Policy) on lerobot's Diffusion Policy in the transformers host on CPU: `fk run` of tiny-dp3 loads
lerobot's DiffusionModel (its DiffusionConditionalUnet1d built from its DiffusionConfig, its DDIM loop) behind the
loader's DP3 point-cloud encoder, one item a whole 3-step denoising loop to an 8 x 4 action sequence. Passthrough
gives the stock actions bit for bit with gemm in every nn.Linear, layer_norm in the encoder's LayerNorms and conv2d in
the U-Net's Conv1d (each as a conv2d over one row; its GroupNorm and Mish have no slot); fk-wrong's wrong-gemm and
wrong-conv2d each fail the diff. Marked `engine`."""

import pytest

from fk_adapters.engines.transformers.libraries import side_site
from tests.engines.transformers.test_transformers_cpu import fk

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(not side_site.installed("lerobot"),
                                 reason="lerobot is not installed (side site)")]

# nn.Linear: the encoder's 4 point-MLP and projection + 2 state-MLP, the U-Net's 2 timestep-MLP + 12 FiLM
# (one per residual block: 6 down, 2 mid, 4 up); the encoder runs once, the U-Net's 14 at each of the 3 steps
LINEARS, LINEAR_CALLS = 20, 6 + 14 * 3
CONVS = 33  # the U-Net's nn.Conv1d (two in each residual block, their channel-changing 1 x 1, down / upsampling, final)
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # both sides alike on a busy 2-core machine


def test_passthrough_gives_the_stock_actions_and_a_wrong_gemm_fails(tmp_path):
    (tmp_path / "pass").mkdir()
    p, res, _ = fk(tmp_path / "pass", "run", "--plugins", "passthrough", "--scenario", "tiny-dp3",
                   "--correctness-only", "--allow-uncovered", env=ONE_THREAD)
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["status"] == "PASSED", row.get("failures")
    out = row["correctness"]["outputs"]["actions"]
    assert out["shape"] == [1, 8, 4] and out["max_abs"] == 0.0, out
    # the float64 forward runs, the loop's own float32 timestep embeddings included (float32 before: the reference
    # failed on "mat1 and mat2 must have the same dtype", and fixed thresholds judged fk46-dp3 on an H100)
    ref = row["correctness"]["reference"]
    assert ref["dtype"] == "float64" and ref["tensors"] == 1 and out["reference"]["ratio_mean_abs"] == 1.0, ref
    ev = row["evidence"]["slots"]
    assert ev["gemm"]["status"] == "exercised" and ev["gemm"]["entered"] == ["Linear"], ev["gemm"]
    assert ev["gemm"]["layers"] == LINEARS and ev["gemm"]["calls"] == LINEAR_CALLS, ev["gemm"]
    assert ev["layer_norm"]["status"] == "exercised" and ev["layer_norm"]["layers"] == ev["layer_norm"]["calls"] == 4
    assert ev["conv2d"]["entered"] == ["Conv1d (as a conv2d over one row)"], ev["conv2d"]
    assert ev["conv2d"]["layers"] == CONVS and ev["conv2d"]["calls"] == CONVS * 3, ev["conv2d"]
    for wrong, slot in (("wrong-gemm", "gemm"), ("wrong-conv2d", "conv2d")):
        (tmp_path / wrong).mkdir()
        p, res, _ = fk(tmp_path / wrong, "run", "--plugins", wrong, "--scenario", "tiny-dp3",
                       "--correctness-only", "--allow-uncovered", env=ONE_THREAD)
        assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
        (row,) = res["scenarios"]
        assert row["status"] == "INCORRECT" and row["evidence"]["slots"][slot]["status"] == "exercised", wrong
