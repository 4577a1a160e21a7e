"""Real SGLang on the GPU: its own kernels in the slot interface, and the whole loop as a user runs it.

Marked ``gpu`` (skipped in CI, where there is no GPU and no SGLang); the evidence is under
``reports/gpu/``. SGLang is imported only in subprocesses and in the natives test.
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from fk_adapters.tasks import SLOTS

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(importlib.util.find_spec("sglang") is None, reason="sglang is not installed")]

BF16_TOL = {"atol": 1.6e-2, "rtol": 1.6e-2}
CASES = [(name, i) for name in sorted(SLOTS) if "sglang" in SLOTS[name].entries for i in range(len(SLOTS[name].cases))
         if SLOTS[name].cases[i].get("activation") != "gelu_tanh"  # SGLang's MoE has no tanh gelu (its layers: Stock)
         and SLOTS[name].cases[i].get("layout", "plain") == "plain"]  # SGLang's KV pool: contiguous [slots, Hkv, D]


@pytest.mark.parametrize("name,index", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_sglang_natives_match_the_slot_reference(name, index):
    """What the passthrough plugin routes to: SGLang's kernels, called in the slot interface."""
    from fk_adapters.engines.sglang.natives import NATIVES

    slot = SLOTS[name]
    args = slot.make_inputs(slot.cases[index], torch.bfloat16, "cuda", torch.Generator().manual_seed(index))
    mine = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    out = NATIVES[name](*mine)
    want = slot.run_reference(args)
    got = (out,) if not slot.in_place else tuple(mine[i] for i in slot.mutated_positions() if mine[i] is not None)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.float(), **BF16_TOL)


def fk_run(tmp_path, out_name, *args):
    out = tmp_path / out_name
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "run", "--engine", "sglang", "--out", str(out),
           "--model-cache", str(tmp_path / "models"), "--timeout", "600", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=1800)
    res = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    return p, res


def test_triton_plugin_runs_under_sglang_graphs(tmp_path):
    """Default SGLang (decode full graphs, breakable prefill graphs): the Triton kernels show in the
    profile, in the scheduler process, and the outputs agree. (The wrong plugin is shown failing on
    the 8B-shaped scenario in reports/gpu/: a 2-layer model in bfloat16 stays inside the bf16 limits.)"""
    p, res = fk_run(tmp_path, "triton", "--plugins", "triton", "--scenario", "tiny-llama", "--dtype", "bfloat16",
                    "--quick", "--allow-uncovered")
    assert res is not None, p.stderr[-3000:]
    assert res["mode_detail"].startswith("CUDA graphs")
    row = res["scenarios"][0]
    assert row["status"] == "PASSED", (row["failures"], p.stdout[-3000:])
    slots = row["evidence"]["slots"]
    for slot in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding"):
        assert slots[slot]["status"] == "exercised" and slots[slot]["profiler_hits"] > 0, (slot, slots[slot])
    assert res["verdict"] == "PASS"


def test_capture_records_sglang_call_signatures(tmp_path):
    """fk capture in SGLang (graphs off): the signatures its hooked forward_cuda calls carry, per slot."""
    out = tmp_path / "workloads"
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "capture", "--engine", "sglang", "--scenario", "tiny-llama",
           "--dtype", "bfloat16", "--quick", "--out", str(out), "--model-cache", str(tmp_path / "models"),
           "--timeout", "600"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=900)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    wl = json.loads((out / "tiny-llama" / "sglang.json").read_text())
    assert (wl["engine"], wl["device"], wl["mode"], wl["dtype"]) == ("sglang", "cuda", "eager", "bfloat16")
    for slot in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding"):
        assert wl["total_calls"][slot] > 0 and wl["slots"][slot], (slot, wl["total_calls"])
    for r in wl["slots"]["rms_norm"]:
        assert r["args"][0]["shape"][-1] == 256 and r["args"][0]["dtype"] == "bfloat16"
    assert {r["args"][5]["value"] for r in wl["slots"]["rotary_embedding"]} == {True}  # is_neox
