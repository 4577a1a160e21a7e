"""Real diffusers on CPU: tiny-hunyuanvideo's whole text-to-video loop (4 guided flow-matching steps, two calls a
step) through `fk run`. Passthrough gives the stock latents bit for bit with the gemm, rms_norm, layer_norm and sdpa
(diffusers' attention registry) slots exercised at every call; fk-wrong's wrong-gemm fails the diff. Marked `engine`."""
import importlib.util

import pytest

from tests.engines.transformers.test_diffusers_cpu import fk_run

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="diffusers is not installed")]

CALLS = 4 * 2  # 4 steps, each the prompt's call and the negative prompt's


def test_passthrough_gives_the_stock_latents_and_a_wrong_gemm_fails(tmp_path):
    p, res, _ = fk_run(tmp_path, "passthrough", "--plugins", "passthrough", "--correctness-only", suite="tiny-video")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["scenario"] == "tiny-hunyuanvideo" and row["status"] == "PASSED"
    latents = row["correctness"]["outputs"]["latents"]
    assert latents["max_abs"] == 0.0 and latents["shape"] == [1, 4, 3, 4, 4]
    ev = row["evidence"]["slots"]
    # every nn.Linear; q/k norms of both streams in 2 blocks; the blocks', refiner's and embedders' LayerNorms
    for slot, entered, layers in (("gemm", ["Linear"], 49), ("rms_norm", ["RMSNorm"], 8),
                                  ("layer_norm", ["LayerNorm"], 14), ("sdpa", ["Attention"], 2)):
        assert ev[slot]["status"] == "exercised" and ev[slot]["entered"] == entered, (slot, ev[slot])
        assert (ev[slot]["layers"], ev[slot]["calls"]) == (layers, layers * CALLS), (slot, ev[slot])
    p, res, _ = fk_run(tmp_path, "wrong", "--plugins", "wrong-gemm", "--correctness-only", suite="tiny-video")
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["status"] == "INCORRECT" and row["evidence"]["slots"]["gemm"]["calls"] > 0
