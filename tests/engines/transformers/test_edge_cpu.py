"""The edge and detection models of the field's own libraries in the transformers host on CPU (tiny-edge: timm's
MobileNetV4 conv-small and EfficientNetV2 rw-t, ultralytics' YOLOv10n fused as its predictor serves it): passthrough
gives the stock outputs bit for bit with conv2d exercised in every Conv2d; fk-wrong's wrong-conv2d fails all three.
Marked `engine`."""
import importlib.util

import pytest

from tests.engines.transformers.test_transformers_cpu import fk

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="transformers is not installed")]

# every Conv2d of each: the 1x1 squeeze-excite ones too, YOLOv10's after its batch norms are folded in
CONVS = {"tiny-mobilenetv4": 46, "tiny-efficientnetv2": 165, "tiny-yolov10": 83}


def test_passthrough_gives_the_stock_outputs_and_a_wrong_conv2d_fails(tmp_path):
    (tmp_path / "pass").mkdir()
    p, res, _ = fk(tmp_path / "pass", "run", "--plugins", "passthrough", "--suite", "tiny-edge",
                   "--correctness-only", "--allow-uncovered")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    for row in res["scenarios"]:
        assert row["status"] == "PASSED" and row["correctness"]["worst"]["max_abs"] == 0.0, row["scenario"]
        conv = row["evidence"]["slots"]["conv2d"]
        assert conv["status"] == "exercised" and conv["layers"] == conv["calls"] == CONVS[row["scenario"]], conv
    (tmp_path / "wrong").mkdir()
    p, res, _ = fk(tmp_path / "wrong", "run", "--plugins", "wrong-conv2d", "--suite", "tiny-edge",
                   "--correctness-only", "--allow-uncovered")
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    assert {r["scenario"]: r["status"] for r in res["scenarios"]} == dict.fromkeys(CONVS, "INCORRECT")
