"""Real HF transformers on CPU: tiny-pi0's whole action loop (prefix KV cache, 4 flow-matching steps of the action
expert) through `fk run`. Passthrough gives the stock actions bit for bit with the gemm, sdpa, layer_norm, conv2d and
gelu_and_mul slots exercised in it; fk-wrong's wrong-sdpa fails the diff. Marked `engine`."""
import importlib.util

import pytest

from tests.engines.transformers.test_transformers_cpu import fk

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="transformers is not installed")]


def test_passthrough_gives_the_stock_actions_and_a_wrong_sdpa_fails(tmp_path):
    (tmp_path / "pass").mkdir()
    p, res, _ = fk(tmp_path / "pass", "run", "--plugins", "passthrough", "--scenario", "tiny-pi0",
                   "--correctness-only", "--allow-uncovered")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["status"] == "PASSED" and row["correctness"]["outputs"]["actions"]["max_abs"] == 0.0
    ev = row["evidence"]["slots"]
    for slot, entered in (("gemm", ["Linear"]), ("sdpa", ["GemmaAttention", "SiglipAttention"]),
                          ("layer_norm", ["LayerNorm"]), ("conv2d", ["Conv2d"])):
        assert ev[slot]["status"] == "exercised" and ev[slot]["entered"] == entered, (slot, ev[slot])
    # the prefix once through both SigLIP and the VLM's 2 layers, then the expert's 2 layers at each of the 4 steps
    assert ev["sdpa"]["calls"] == 2 + 2 + 2 * 4
    assert ev["gelu_and_mul"]["status"] == "exercised"
    (tmp_path / "wrong").mkdir()
    p, res, _ = fk(tmp_path / "wrong", "run", "--plugins", "wrong-sdpa", "--scenario", "tiny-pi0",
                   "--correctness-only", "--allow-uncovered")
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["status"] == "INCORRECT" and row["evidence"]["slots"]["sdpa"]["calls"] > 0
