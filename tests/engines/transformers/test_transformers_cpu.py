"""Real HF transformers on CPU: the whole `fk run` / `fk capture` loop as a user runs it. Marked `engine` (~1 min)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")]


def fk(tmp_path, command, *args):
    out = tmp_path / ("out" if command == "run" else "workloads")
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", command, "--engine", "transformers", "--out", str(out),
           "--model-cache", str(tmp_path / "models"), "--device", "cpu", "--quick", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=600)
    results = out / "results.json"
    return p, (json.loads(results.read_text()) if results.exists() else None), out


def test_triton_plugin_enters_bitnet_and_dinov3_and_no_slot_applies_to_swinv2(tmp_path):
    p, res, out = fk(tmp_path, "run", "--plugins", "triton", "--suite", "tiny-transformers", "--allow-uncovered")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    assert res["engine"] == "transformers" and res["mode_detail"].startswith("eager")
    rows = {r["scenario"]: r for r in res["scenarios"]}
    assert set(rows) == {"tiny-bitnet", "tiny-dinov3", "tiny-swinv2"}
    assert all(r["status"] == "PASSED" for r in rows.values())
    bitnet = rows["tiny-bitnet"]
    assert bitnet["correctness"]["teacher_forced"]["max_abs"] <= res["thresholds"]["float32"]["max_abs"]
    ev = bitnet["evidence"]["slots"]
    assert ev["rms_norm"]["status"] == "exercised" and ev["rms_norm"]["layers"] == 9 and ev["rms_norm"]["calls"] > 0
    assert ev["silu_and_mul"]["status"] == "n/a"  # relu2: left stock, and the notes say why
    assert any("BitNetMLP: activation ReLUSquaredActivation" in n for n in bitnet["notes"])
    assert set(bitnet["perf"]["throughput"]) == {"batch1", "batch4"}
    dino = rows["tiny-dinov3"]
    assert dino["correctness"]["kind"] == "outputs" and dino["correctness"]["passed"]
    assert set(dino["correctness"]["outputs"]) == {"last_hidden_state", "pooler_output"}
    assert 0 < dino["correctness"]["worst"]["rel_mean"] <= res["output_thresholds"]["float32"]["rel_mean"]
    silu = dino["evidence"]["slots"]["silu_and_mul"]
    assert silu["status"] == "exercised" and silu["layers"] == 2 and silu["calls"] > 0
    assert silu["entered"] == ["DINOv3ViTGatedMLP (gate/up concatenated)"]
    assert set(dino["perf"]["throughput"]["batch2"]) == {"items_per_s"}
    swin = rows["tiny-swinv2"]
    assert all(e["status"] == "n/a" for e in swin["evidence"]["slots"].values())
    assert swin["notes"][0].startswith("no selected slot applies to this model")
    assert swin["correctness"]["worst"]["max_abs"] == 0.0
    report = (out / "report.md").read_text()
    assert "items/s" in report and "no selected slot applies" in report and "1 - cosine" in report


def test_passthrough_gives_the_stock_outputs_bit_for_bit(tmp_path):
    p, res, _ = fk(tmp_path, "run", "--plugins", "passthrough", "--scenario", "tiny-dinov3", "--scenario", "tiny-bitnet",
                   "--allow-uncovered")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    rows = {r["scenario"]: r for r in res["scenarios"]}
    dino, bitnet = rows["tiny-dinov3"], rows["tiny-bitnet"]
    assert dino["correctness"]["worst"]["max_abs"] == 0.0 and dino["evidence"]["slots"]["silu_and_mul"]["calls"] > 0
    assert bitnet["correctness"]["teacher_forced"]["max_abs"] == 0.0
    assert bitnet["correctness"]["tokens"]["identical"] == bitnet["correctness"]["tokens"]["requests"]
    assert bitnet["evidence"]["slots"]["rms_norm"]["calls"] > 0


def test_wrong_plugin_fails_the_diff(tmp_path):
    p, res, _ = fk(tmp_path, "run", "--plugins", "wrong", "--scenario", "tiny-bitnet")
    assert p.returncode == 1
    row = res["scenarios"][0]
    assert row["status"] == "INCORRECT" and res["verdict"] == "FAIL"
    assert row["evidence"]["slots"]["rms_norm"]["calls"] > 0  # it ran, and the diff caught it
    assert row["correctness"]["teacher_forced"]["max_abs"] > res["thresholds"]["float32"]["max_abs"]


def test_capture_records_the_slot_calls(tmp_path):
    p, _, out = fk(tmp_path, "capture", "--scenario", "tiny-bitnet")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    wl = json.loads((out / "tiny-bitnet" / "transformers.json").read_text())
    assert (wl["engine"], wl["device"], wl["mode"], wl["dtype"]) == ("transformers", "cpu", "eager", "float32")
    assert set(wl["total_calls"]) == {"rms_norm", "silu_and_mul", "gelu_and_mul"}
    assert wl["total_calls"]["rms_norm"] > 0 and wl["total_calls"]["silu_and_mul"] == 0
    widths = {r["args"][0]["shape"][-1] for r in wl["slots"]["rms_norm"]}
    assert widths == {128, 256}  # hidden norms and the MLP's ffn_sub_norm
    assert all(r["args"][1]["shape"] in ([128], [256]) for r in wl["slots"]["rms_norm"])
    assert any("BitNetMLP" in k for k in wl["not_routed"])
