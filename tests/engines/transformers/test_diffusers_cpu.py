"""Real diffusers models in the transformers host on CPU: `fk run` on the tiny-diffusers suite (tiny-flux, tiny-sdxl),
a passthrough plugin passing with items/s of whole denoising loops, a wrong gemm caught in both; FLUX's attention
through diffusers' registry into the sdpa slot, a wrong sdpa caught. Marked `engine`."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="diffusers is not installed")]

LINEARS = {"tiny-flux": 50, "tiny-sdxl": 139}  # every nn.Linear of each model


def fk_run(tmp_path, out, *args, suite="tiny-diffusers", scenario=None):
    out = tmp_path / out
    picked = ["--scenario", scenario] if scenario else ["--suite", suite]
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "run", "--engine", "transformers", *picked,
           "--out", str(out), "--model-cache", str(tmp_path / "models"), "--device", "cpu", "--allow-uncovered",
           *args]
    # one thread per engine process, both sides alike: on a busy CPU two made a tiny loop a hundred times slower
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=900,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    results = out / "results.json"
    return p, (json.loads(results.read_text()) if results.exists() else None), out


def test_passthrough_passes_both_loops_bit_for_bit_and_a_wrong_gemm_fails_both(tmp_path):
    p, res, out = fk_run(tmp_path, "passthrough", "--plugins", "passthrough", "--smoke")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    rows = {r["scenario"]: r for r in res["scenarios"]}
    assert {n: r["status"] for n, r in rows.items()} == {"tiny-flux": "PASSED", "tiny-sdxl": "PASSED"}
    for name, row in rows.items():
        c = row["correctness"]
        assert c["kind"] == "outputs" and set(c["outputs"]) == {"latents"} and c["worst"]["max_abs"] == 0.0
        gemm = row["evidence"]["slots"]["gemm"]
        assert gemm["status"] == "exercised" and gemm["layers"] == LINEARS[name] and gemm["calls"] > 0
        assert set(row["perf"]["throughput"]) == {"batch1", "batch2"}
        assert set(row["perf"]["throughput"]["batch1"]) == {"items_per_s"}
    sdpa = rows["tiny-flux"]["evidence"]["slots"]["sdpa"]  # 2 double- and 2 single-stream blocks, 4 calls each
    assert sdpa["status"] == "exercised" and sdpa["entered"] == ["FluxAttention"] and sdpa["layers"] == 4, sdpa
    assert sdpa["calls"] > 0 and rows["tiny-sdxl"]["evidence"]["slots"]["sdpa"]["layers"] == 0  # F.sdpa itself
    assert rows["tiny-flux"]["correctness"]["outputs"]["latents"]["shape"] == [1, 16, 16]
    assert rows["tiny-sdxl"]["correctness"]["outputs"]["latents"]["shape"] == [1, 4, 8, 8]
    assert "items/s" in (out / "report.md").read_text()

    p, res, _ = fk_run(tmp_path, "wrong-gemm", "--plugins", "wrong-gemm", "--correctness-only")
    assert res is not None and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    rows = {r["scenario"]: r for r in res["scenarios"]}
    assert {n: r["status"] for n, r in rows.items()} == {"tiny-flux": "INCORRECT", "tiny-sdxl": "INCORRECT"}
    assert all(r["evidence"]["slots"]["gemm"]["status"] == "exercised" for r in rows.values())


def test_a_wrong_sdpa_in_fluxs_attention_fails(tmp_path):
    p, res, _ = fk_run(tmp_path, "wrong-sdpa", "--plugins", "wrong-sdpa", "--correctness-only", scenario="tiny-flux")
    assert res is not None and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["status"] == "INCORRECT" and row["evidence"]["slots"]["sdpa"]["calls"] == 16, row["evidence"]
