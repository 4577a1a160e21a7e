"""A PyTorch Geometric model in the transformers host on CPU: `fk run` of tiny-lightgcn loads torch_geometric's own
LightGCN from its seeded checkpoint, ranks every item for a batch of users on the seeded graph, and says that no
slot applies (LightGCN has no linear layer: sparse propagation and dot products). Marked `engine` (30 s)."""
import importlib.util

import pytest

from tests.engines.transformers.test_diffusers_cpu import fk_run

pytestmark = [pytest.mark.engine, pytest.mark.skipif(importlib.util.find_spec("torch_geometric") is None,
                                                     reason="torch_geometric is not installed")]


def test_lightgcn_runs_and_no_slot_claims_it(tmp_path):
    p, res, _ = fk_run(tmp_path, "passthrough", "--plugins", "passthrough", "--correctness-only", suite="tiny-pyg")
    assert res is not None, p.stderr[-3000:]
    (row,) = res["scenarios"]
    assert row["scenario"] == "tiny-lightgcn" and row["status"] == "NOT_APPLICABLE", row.get("failures")
    out = row["correctness"]["outputs"][""]
    assert row["correctness"]["passed"] and out["shape"] == [4, 120] and out["max_abs"] == 0.0
    assert {v["status"] for v in row["evidence"]["slots"].values()} == {"n/a"}
