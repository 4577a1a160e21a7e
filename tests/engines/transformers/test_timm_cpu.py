"""Real timm models in the transformers host on CPU (tiny-timm: MobileNetV4 conv-small, EfficientNetV2 rw-t, their
timm names built by ``timm.create_model``): passthrough gives the stock logits bit for bit with conv2d exercised in
every Conv2d; fk-wrong's wrong-conv2d fails both. Marked `engine`."""
import importlib.util

import pytest

from tests.engines.transformers.test_transformers_cpu import fk

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="transformers is not installed")]

CONVS = {"tiny-mobilenetv4": 46, "tiny-efficientnetv2": 165}  # every Conv2d of each, the 1x1 squeeze-excite ones too


def test_passthrough_gives_the_stock_logits_and_a_wrong_conv2d_fails(tmp_path):
    (tmp_path / "pass").mkdir()
    p, res, _ = fk(tmp_path / "pass", "run", "--plugins", "passthrough", "--suite", "tiny-timm",
                   "--correctness-only", "--allow-uncovered")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    for row in res["scenarios"]:
        assert row["status"] == "PASSED" and row["correctness"]["worst"]["max_abs"] == 0.0, row["scenario"]
        conv = row["evidence"]["slots"]["conv2d"]
        assert conv["status"] == "exercised" and conv["layers"] == conv["calls"] == CONVS[row["scenario"]], conv
    (tmp_path / "wrong").mkdir()
    p, res, _ = fk(tmp_path / "wrong", "run", "--plugins", "wrong-conv2d", "--suite", "tiny-timm",
                   "--correctness-only", "--allow-uncovered")
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    assert {r["scenario"]: r["status"] for r in res["scenarios"]} == dict.fromkeys(CONVS, "INCORRECT")
