"""Real HF transformers on CPU: layer_norm, conv2d and sdpa through `fk run` on tiny-dinov3 (LayerNorm, a patch
Conv2d, sdpa attention). The references as a plugin PASS; fk-wrong's wrong-sdpa (the last key never attended)
FAILS. tiny-sam3's three attention classes take the slot too. Marked `engine`."""
import importlib.util
import os

import pytest

from tests.engines.transformers.test_transformers_cpu import fk

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="transformers is not installed")]

REFERENCES = """
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks import SLOTS

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot=s, fn=SLOTS[s].reference, devices=("cpu", "cuda")) for s in ("layer_norm", "conv2d", "sdpa")]
"""


def test_references_pass_and_a_wrong_sdpa_fails_on_dinov3(tmp_path, make_plugin):
    make_plugin("visionrefs", REFERENCES)
    env = {"PYTHONPATH": str(tmp_path / "site") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p, res, _ = fk(tmp_path, "run", "--plugins", "visionrefs", "--scenario", "tiny-dinov3", env=env)
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["status"] == "PASSED" and row["correctness"]["passed"]
    ev = row["evidence"]["slots"]
    for slot, entered, layers in (("layer_norm", ["LayerNorm"], 5), ("conv2d", ["Conv2d"], 1),
                                  ("sdpa", ["DINOv3ViTAttention"], 2)):
        assert (ev[slot]["status"], ev[slot]["entered"], ev[slot]["layers"]) == ("exercised", entered, layers), ev
        assert ev[slot]["calls"] > 0
    assert 0 < row["correctness"]["worst"]["rel_mean"] <= res["output_thresholds"]["float32"]["rel_mean"]
    (tmp_path / "wrong").mkdir()
    p, res, _ = fk(tmp_path / "wrong", "run", "--plugins", "wrong-sdpa", "--scenario", "tiny-dinov3",
                   "--correctness-only")
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["status"] == "INCORRECT" and not row["correctness"]["passed"]
    ev = row["evidence"]["slots"]
    assert ev["sdpa"]["status"] == "exercised" and ev["sdpa"]["calls"] > 0  # it ran, and the diff caught it


SAM3_ATTENTION = ["Sam3ViTRoPEAttention", "CLIPAttention", "Sam3Attention"]


def test_sam3s_attention_enters_sdpa_passthrough_bit_for_bit_and_a_wrong_sdpa_fails(tmp_path):
    """tiny-sam3: Sam3Attention looks "sdpa" up by name (its fallback from flash attention), which keeps the model's
    attention in the slot; passthrough gives all six outputs bit for bit."""
    p, res, _ = fk(tmp_path, "run", "--plugins", "passthrough", "--scenario", "tiny-sam3", "--correctness-only",
                   "--allow-uncovered")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    outputs = row["correctness"]["outputs"]
    assert len(outputs) == 6 and all(o["max_abs"] == 0.0 for o in outputs.values()), outputs
    ev = row["evidence"]["slots"]["sdpa"]
    assert (ev["status"], ev["entered"], ev["layers"], ev["calls"]) == ("exercised", SAM3_ATTENTION, 12, 10), ev
    (tmp_path / "wrong").mkdir()
    p, res, _ = fk(tmp_path / "wrong", "run", "--plugins", "wrong-sdpa", "--scenario", "tiny-sam3",
                   "--correctness-only", "--allow-uncovered")
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["status"] == "INCORRECT" and row["evidence"]["slots"]["sdpa"]["calls"] == 10
