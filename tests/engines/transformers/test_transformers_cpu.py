"""Real HF transformers on CPU: the whole `fk run` / `fk capture` loop as a user runs it. Marked `engine` (~1 min)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="transformers is not installed")]


def fk(tmp_path, command, *args, env=None):
    out = tmp_path / ("out" if command == "run" else "workloads")
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", command, "--engine", "transformers", "--out", str(out),
           "--model-cache", str(tmp_path / "models"), "--device", "cpu", "--quick", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ, **(env or {})),
                       timeout=600)
    results = out / "results.json"
    return p, (json.loads(results.read_text()) if results.exists() else None), out


def passthrough_exact_and_wrong_gemm_fails(tmp_path, scenario: str, shape: list, linears: int) -> None:
    """A library host's tiny scenario, one thread: passthrough gives the stock output bit for bit (``shape``) with
    gemm, its one exercised slot, in all ``linears`` nn.Linear layers; fk-wrong's wrong-gemm makes it INCORRECT."""
    def run(plugin):
        (tmp_path / plugin).mkdir()
        p, res, _ = fk(tmp_path / plugin, "run", "--scenario", scenario, "--plugins", plugin, "--correctness-only",
                       "--allow-uncovered", env={"OMP_NUM_THREADS": "1"})
        assert res is not None, (p.stdout[-3000:], p.stderr[-3000:])
        return p, res

    p, res = run("passthrough")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["scenario"] == scenario and row["status"] == "PASSED", row.get("failures")
    out = row["correctness"]["outputs"][""]
    assert row["correctness"]["passed"] and out["shape"] == shape and out["max_abs"] == 0.0
    slots = row["evidence"]["slots"]
    assert slots["gemm"]["status"] == "exercised" and slots["gemm"]["layers"] == slots["gemm"]["calls"] == linears
    assert {k for k, v in slots.items() if v["status"] == "exercised"} == {"gemm"}

    p, res = run("wrong-gemm")
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["status"] == "INCORRECT" and row["evidence"]["slots"]["gemm"]["status"] == "exercised"


@pytest.mark.slow
def test_triton_plugin_enters_bitnet_and_dinov3_and_no_slot_applies_to_swinv2(tmp_path):
    import torch
    from safetensors.torch import load_file

    p, res, out = fk(tmp_path, "run", "--plugins", "triton", "--suite", "tiny-transformers", "--allow-uncovered")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    assert res["engine"] == "transformers" and res["mode_detail"].startswith("eager")
    rows = {r["scenario"]: r for r in res["scenarios"]}
    assert set(rows) == {"tiny-bitnet", "tiny-dinov3", "tiny-dinov3-bf16", "tiny-swinv2", "tiny-colbertv2"}
    assert {n: r["status"] for n, r in rows.items()} == {  # SwinV2 and ColBERTv2 have no layer for a Triton slot
        "tiny-bitnet": "PASSED", "tiny-dinov3": "PASSED", "tiny-dinov3-bf16": "PASSED",
        "tiny-swinv2": "NOT_APPLICABLE", "tiny-colbertv2": "NOT_APPLICABLE"}
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
    ref64 = dino["correctness"]["reference"]  # float32: the stock model's float64 forward judges
    assert ref64["dtype"] == "float64" and ref64["tensors"] == 2
    assert all(r["reference"]["ratio_mean_abs"] < 1.25 for r in dino["correctness"]["outputs"].values())
    bf16 = rows["tiny-dinov3-bf16"]["correctness"]
    assert bf16["reference"]["tensors"] == 2 and bf16["passed"]
    for r in bf16["outputs"].values():  # as far from the baseline as bf16 is from float32, as close to float32
        ref = r["reference"]
        assert r["rel_mean"] > 0.25 * ref["err_b_mean_abs"] / ref["ref_mean_abs"] and ref["ratio_mean_abs"] < 1.2
    logs = out / "logs" / "tiny-dinov3-bf16"
    assert bf16["reference"]["file"] == str(logs / "baseline" / "reference.safetensors")
    refs = [load_file(str(logs / side / "reference.safetensors")) for side in ("baseline", "candidate")]
    assert all(torch.equal(refs[0][k], refs[1][k]) for k in refs[0])  # the same stock model, before the plugin
    f64 = load_file(str(out / "logs" / "tiny-dinov3" / "baseline" / "reference.safetensors"))
    assert {t.dtype for t in f64.values()} == {torch.float64}
    swin = rows["tiny-swinv2"]
    assert all(e["status"] == "n/a" for e in swin["evidence"]["slots"].values())
    assert swin["status"] == "NOT_APPLICABLE" and swin["notes"][0].startswith("no selected slot applies to this model")
    assert swin["correctness"]["worst"]["max_abs"] == 0.0
    colbert = rows["tiny-colbertv2"]  # the checkpoint's own class (BERT + linear head), built by fk
    assert set(colbert["correctness"]["outputs"]) == {"last_hidden_state", "embeddings"}
    assert colbert["correctness"]["outputs"]["embeddings"]["shape"] == [2, 32, 16]
    report = (out / "report.md").read_text()
    assert "items/s" in report and "no selected slot applies" in report and "1 - cosine" in report
    assert "err_c / err_b" in report and "float64 for float32" in report


def test_passthrough_gives_the_stock_outputs_bit_for_bit(tmp_path):
    p, res, _ = fk(tmp_path, "run", "--plugins", "passthrough", "--scenario", "tiny-dinov3",
                   "--scenario", "tiny-bitnet", "--scenario", "tiny-dinov3-bf16", "--allow-uncovered")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    rows = {r["scenario"]: r for r in res["scenarios"]}
    dino, bitnet = rows["tiny-dinov3"], rows["tiny-bitnet"]
    assert dino["correctness"]["worst"]["max_abs"] == 0.0 and dino["evidence"]["slots"]["silu_and_mul"]["calls"] > 0
    bf16 = rows["tiny-dinov3-bf16"]["correctness"]
    assert bf16["worst"]["max_abs"] == 0.0 and bf16["worst"]["ratio_mean_abs"] == bf16["worst"]["ratio_max_abs"] == 1.0
    assert dino["correctness"]["worst"]["ratio_mean_abs"] == 1.0  # against the float64 forward: err_c == err_b
    assert all(r["reference"]["err_c_mean_abs"] == r["reference"]["err_b_mean_abs"] > 0
               for r in bf16["outputs"].values())
    assert bitnet["correctness"]["teacher_forced"]["max_abs"] == 0.0
    assert bitnet["correctness"]["tokens"]["identical"] == bitnet["correctness"]["tokens"]["requests"]
    assert bitnet["evidence"]["slots"]["rms_norm"]["calls"] > 0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "in float16/bfloat16, more than 10% off it: rounding dominates those outputs" in report


TAIL_SILU = """
import torch.nn.functional as F
from fk_adapters import Kernel, hookimpl

def tail_silu_and_mul(x):  # a masking bug, like fk-wrong's: the last eighth of each row is left zero
    d = x.shape[-1] // 2
    y = F.silu(x[..., :d].float()) * x[..., d:].float()
    y[..., d - d // 8:] = 0
    return y.to(x.dtype)

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="silu_and_mul", fn=tail_silu_and_mul, devices=("cpu", "cuda"))]
"""


def test_wrong_kernels_fail_the_diff_in_float32_and_against_the_references(tmp_path, make_plugin):
    make_plugin("tailsilu", TAIL_SILU)
    site = str(tmp_path / "site")  # where make_plugin installs it
    p, res, _ = fk(tmp_path, "run", "--plugins", "wrong,tailsilu", "--scenario", "tiny-bitnet", "--scenario",
                   "tiny-dinov3-bf16", "--scenario", "tiny-dinov3",
                   env={"PYTHONPATH": site + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    rows = {r["scenario"]: r for r in res["scenarios"]}
    bitnet, dino, dino32 = rows["tiny-bitnet"], rows["tiny-dinov3-bf16"], rows["tiny-dinov3"]
    assert bitnet["status"] == dino["status"] == dino32["status"] == "INCORRECT"
    assert dino32["correctness"]["reference"]["dtype"] == "float64" and dino32["correctness"]["reference"]["tensors"]
    assert all("float64 reference" in f for f in dino32["failures"])
    assert bitnet["evidence"]["slots"]["rms_norm"]["calls"] > 0  # it ran, and the diff caught it
    assert bitnet["correctness"]["teacher_forced"]["max_abs"] > res["thresholds"]["float32"]["max_abs"]
    assert dino["evidence"]["slots"]["silu_and_mul"]["calls"] > 0
    assert dino["correctness"]["worst"]["ratio_mean_abs"] > 5  # far further from the float32 truth than the engine
    assert all("float32 reference" in f for f in dino["failures"])


GEMM_MOE = """
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks.gemm import gemm
from fk_adapters.tasks.moe import fused_moe

def first_expert_only(x, w13, w2, topk_weights, topk_ids, *rest):  # drops every token's later experts
    return fused_moe(x, w13, w2, topk_weights[:, :1], topk_ids[:, :1], *rest)

@hookimpl
def fk_kernels(engine, device):
    moe = first_expert_only if "{which}" == "wrong" else fused_moe
    return [Kernel(slot="gemm", fn=gemm, devices=("cpu", "cuda")), Kernel(slot="fused_moe", fn=moe, devices=("cpu",))]
"""


def test_gemm_and_fused_moe_references_enter_mixtral_and_gpt_oss_and_a_wrong_moe_fails(tmp_path, make_plugin):
    env = {"PYTHONPATH": str(tmp_path / "site") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    make_plugin("gemmmoe", GEMM_MOE.format(which="reference"))
    p, res, _ = fk(tmp_path, "run", "--plugins", "gemmmoe", "--scenario", "tiny-mixtral", "--scenario", "tiny-gpt-oss",
                   env=env)
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    rows = {r["scenario"]: r for r in res["scenarios"]}
    for name, experts in (("tiny-mixtral", "MixtralExperts (silu)"),
                          ("tiny-gpt-oss", "GptOssExperts (swigluoai, transposed, biases)")):
        ev = rows[name]["evidence"]["slots"]
        assert ev["gemm"]["status"] == ev["fused_moe"]["status"] == "exercised", ev
        assert (ev["gemm"]["entered"], ev["gemm"]["layers"]) == (["Linear"], 9)  # q, k, v, o x 2 and lm_head
        assert (ev["fused_moe"]["entered"], ev["fused_moe"]["layers"]) == ([experts], 2)
        assert ev["gemm"]["calls"] > 0 and ev["fused_moe"]["calls"] > 0
        assert rows[name]["correctness"]["tokens"]["identical"] == rows[name]["correctness"]["tokens"]["requests"]
    make_plugin("wrongmoe", GEMM_MOE.format(which="wrong"))
    (tmp_path / "wrong").mkdir()
    p, res, _ = fk(tmp_path / "wrong", "run", "--plugins", "wrongmoe", "--scenario", "tiny-mixtral", env=env)
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    (row,) = res["scenarios"]
    assert row["status"] == "INCORRECT" and row["evidence"]["slots"]["fused_moe"]["calls"] > 0
    assert row["correctness"]["teacher_forced"]["max_abs"] > res["thresholds"]["float32"]["max_abs"]


def test_capture_records_the_slot_calls(tmp_path):
    from fk_adapters.engines.loading import capture_slots

    p, _, out = fk(tmp_path, "capture", "--scenario", "tiny-bitnet", "--scenario", "tiny-gpt-oss")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    wl = json.loads((out / "tiny-bitnet" / "transformers.json").read_text())
    assert (wl["engine"], wl["device"], wl["mode"], wl["dtype"]) == ("transformers", "cpu", "eager", "float32")
    assert set(wl["total_calls"]) == set(capture_slots("transformers"))  # every slot the host takes, 0 or not
    calls = wl["total_calls"]
    assert calls["rms_norm"] > 0 and calls["gemm"] > 0 and calls["silu_and_mul"] == calls["fused_moe"] == 0
    assert calls["sdpa"] > 0 and calls["layer_norm"] == calls["conv2d"] == 0  # its attention through fk_sdpa
    moe = json.loads((out / "tiny-gpt-oss" / "transformers.json").read_text())
    assert moe["total_calls"]["gemm"] > 0 and moe["total_calls"]["fused_moe"] > 0
    for r in moe["slots"]["fused_moe"]:  # GPT-OSS's experts as the slot sees them: transposed views, biases
        w13, w2, b13 = r["args"][1], r["args"][2], r["args"][7]
        assert (w13["shape"], w13["stride"], w2["shape"], b13["shape"]) == ([4, 256, 128], [32768, 1, 256],
                                                                           [4, 128, 128], [4, 256])
        assert [a["value"] for a in r["args"][5:7] + r["args"][9:]] == ["swigluoai", False, 1.702, 7.0, 1.0]
    widths = {r["args"][0]["shape"][-1] for r in wl["slots"]["rms_norm"]}
    assert widths == {128, 256}  # hidden norms and the MLP's ffn_sub_norm
    assert all(r["args"][1]["shape"] in ([128], [256]) for r in wl["slots"]["rms_norm"])
    assert any("BitNetMLP" in k for k in wl["not_routed"])
