"""OpenFold3 (openfold3's own OpenFold3 model, shrunk through its model config) in the transformers host on CPU
(tiny-openfold3): one call is the whole inference forward (trunk, diffusion sampling, confidence heads) on seeded
features; passthrough gives the stock outputs bit for bit with gemm exercised in every OpenFold3 Linear and
layer_norm in every OpenFold3 LayerNorm; fk-wrong's wrong-layer-norm fails it. Marked `engine`."""
import importlib.util

import pytest

from tests.engines.transformers.test_transformers_cpu import fk

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="transformers is not installed")]

SCENARIO = "tiny-openfold3"
# OpenFold3 Linear and LayerNorm modules the tiny model builds (the diffusion module counted once, though the
# sampler holds it too), and their calls in one forward
LAYERS = {"gemm": 322, "layer_norm": 95}
CALLS = {"gemm": 496, "layer_norm": 197}


def test_passthrough_gives_the_stock_outputs_and_a_wrong_layer_norm_fails(tmp_path):
    (tmp_path / "pass").mkdir()
    p, res, _ = fk(tmp_path / "pass", "run", "--plugins", "passthrough", "--scenario", SCENARIO,
                   "--correctness-only", "--allow-uncovered")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    [row] = res["scenarios"]
    assert row["status"] == "PASSED" and row["correctness"]["worst"]["max_abs"] == 0.0, row
    slots = row["evidence"]["slots"]
    for slot, layers in LAYERS.items():
        assert slots[slot]["status"] == "exercised", slots[slot]
        assert slots[slot]["layers"] == layers and slots[slot]["calls"] == CALLS[slot], slots[slot]
    (tmp_path / "wrong").mkdir()
    p, res, _ = fk(tmp_path / "wrong", "run", "--plugins", "wrong-layer-norm", "--scenario", SCENARIO,
                   "--correctness-only", "--allow-uncovered")
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    assert [r["status"] for r in res["scenarios"]] == ["INCORRECT"]
