"""nerfstudio's Instant-NGP field in the transformers host on CPU (tiny-instantngp: NerfactoField with its pure-torch
hash grid, rays rendered by nerfstudio's sampler and renderers): passthrough gives the stock rgb, accumulation and
depth bit for bit with gemm exercised in all five nn.Linear of its two MLPs; fk-wrong's wrong-gemm fails it.
Marked `engine`."""

import pytest

from fk_adapters.engines.transformers.libraries import side_site
from tests.engines.transformers.test_transformers_cpu import fk

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(not side_site.installed("nerfstudio"), reason="nerfstudio is not installed")]

LINEARS = 5  # density MLP: 2 layers (1 hidden); colour MLP: 3 layers (2 hidden)


def fk_run(tmp_path, out, plugin):
    (tmp_path / out).mkdir()
    p, res, _ = fk(tmp_path / out, "run", "--scenario", "tiny-instantngp", "--plugins", plugin, "--correctness-only",
                   "--allow-uncovered", env={"OMP_NUM_THREADS": "1"})
    return p, res


def test_passthrough_renders_the_stock_rays_and_a_wrong_gemm_fails(tmp_path):
    p, res = fk_run(tmp_path, "passthrough", "passthrough")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["scenario"] == "tiny-instantngp" and row["status"] == "PASSED", row.get("failures")
    c = row["correctness"]
    assert c["passed"] and c["worst"]["max_abs"] == 0.0
    assert {k: v["shape"] for k, v in c["outputs"].items()} == {"rgb": [32, 3], "accumulation": [32], "depth": [32]}
    slots = row["evidence"]["slots"]
    assert slots["gemm"]["status"] == "exercised" and slots["gemm"]["layers"] == slots["gemm"]["calls"] == LINEARS
    assert {k for k, v in slots.items() if v["status"] != "n/a"} == {"gemm"}

    p, res = fk_run(tmp_path, "wrong-gemm", "wrong-gemm")
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["status"] == "INCORRECT" and row["evidence"]["slots"]["gemm"]["status"] == "exercised"
