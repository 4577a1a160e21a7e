"""nerfstudio's Instant-NGP field in the transformers host on CPU (tiny-instantngp: NerfactoField with its pure-torch
hash grid, rays rendered by nerfstudio's sampler and renderers): passthrough gives the stock rgb, accumulation and
depth bit for bit with gemm exercised in all five nn.Linear of its two MLPs; fk-wrong's wrong-gemm fails it.
Marked `engine`."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest


def _nerfstudio_installed() -> bool:
    """nerfstudio in the environment or the side site its loader puts on the path (not imported here)."""
    from fk_adapters.engines.transformers.libraries import side_site

    return (importlib.util.find_spec("nerfstudio") is not None
            or os.path.isdir(os.path.join(side_site.folder(), "nerfstudio")))


pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(not _nerfstudio_installed(), reason="nerfstudio is not installed")]

LINEARS = 5  # density MLP: 2 layers (1 hidden); colour MLP: 3 layers (2 hidden)


def fk_run(tmp_path, out, plugin):
    out = tmp_path / out
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "run", "--engine", "transformers", "--scenario",
           "tiny-instantngp", "--out", str(out), "--model-cache", str(tmp_path / "models"), "--device", "cpu",
           "--plugins", plugin, "--correctness-only", "--allow-uncovered"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=600,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    results = out / "results.json"
    return p, (json.loads(results.read_text()) if results.exists() else None)


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
