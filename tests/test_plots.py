"""fk_adapters.plots: rows extracted from hand-built results, and PNGs written (valid, non-empty)."""
from __future__ import annotations

import math
import os
import sys

import pytest

from fk_adapters import compare, metrics, stats

pytest.importorskip("matplotlib")

from fk_adapters import plots  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    with open(path, "rb") as f:
        head = f.read(8)
    return head == PNG_MAGIC and os.path.getsize(path) > 1000


def _range_ratio(ratio, pair_min, pair_max, n=5):
    """A ratio dict as older results files hold it: no per-repeat values, only the repeat-by-repeat range."""
    side = {"n": n, "median": 1.0, "min": 1.0, "max": 1.0, "rel_spread": 0.0}
    return {"ratio": ratio, "pair_min": pair_min, "pair_max": pair_max, "baseline": dict(side),
            "candidate": dict(side)}


def _run_results(engine="vllm", aa=False, interleave=5):
    """Interleaved rounds by default (intervals drawn); interleave=1: a single pair (no interval)."""
    values = metrics.paired_ratio([100.0, 102.0, 98.0, 101.0, 99.0], [110.0, 111.0, 108.0, 112.0, 109.0])
    return {
        "engine": engine, "engine_version": "1.0", "device": "cuda", "candidate": "triton", "aa": aa,
        "interleave": interleave,
        "scenarios": [
            {"scenario": "llama", "status": "PASSED", "perf": {
                "throughput": {"balanced": {"tokens_per_s": _range_ratio(0.9, 0.8, 0.95),
                                            "output_tokens_per_s": _range_ratio(0.5, 0.4, 0.6)}},
                "latency": {"batch1": {"latency_s": _range_ratio(1.02, 0.97, 1.07)}}}},
            {"scenario": "dinov3", "status": "INCORRECT", "perf": {
                "throughput": {"batch32": {"items_per_s": _range_ratio(1.01, 1.01, 1.01, n=1)}},
                "latency": {"batch1": {"latency_s": {"ratio": None}}}}},
            {"scenario": "qwen", "status": "PASSED", "perf": {
                "throughput": {"balanced": {"tokens_per_s": values}}}},
            {"scenario": "broken", "status": "LOAD_ERROR"},
        ]}


def _check_results():
    def shape(speedup, calls, problems=()):
        return {"args": [], "speedup": speedup, "calls": calls, "problems": list(problems),
                "candidate": {"n": 50, "median_s": 1e-6, "q1_s": 1e-6, "q3_s": 1e-6},
                "engine": {"n": 50, "median_s": 1e-6, "q1_s": 1e-6, "q3_s": 1e-6}}

    return {"kind": "check", "engine": "vllm", "engine_version": "0.26.0", "device": "cuda", "slots": [
        {"workload": "llama", "plugin": "triton", "slot": "rms_norm", "status": "PASSED", "calls": 30,
         "geomean_speedup": 1.2, "shapes": [shape(1.1, 10), shape(1.5, 20)]},
        {"workload": "llama", "plugin": "triton", "slot": "silu_and_mul", "status": "PASSED", "calls": 4,
         "shapes": [shape(2.0, 1), shape(0.5, 3)]},  # no geomean_speedup stored: recomputed, call-weighted
        {"workload": "llama", "plugin": "wrong", "slot": "rms_norm", "status": "INCORRECT", "calls": 2,
         "geomean_speedup": None, "shapes": [shape(None, 2, ["mismatch"])]},
        {"workload": "llama", "plugin": "wrong", "slot": "rotary_embedding", "status": "NOT_OFFERED", "shapes": []},
    ]}


# ---------------------------------------------------------------------------------------------------------- rows

def test_ratio_rows_primary_metrics_and_range_intervals():
    rows = plots.ratio_rows_from_results(_run_results())
    keys = [(r["scenario"], r["kind"], r["workload"], r["metric"]) for r in rows]
    assert keys == [("llama", "throughput", "balanced", "tokens_per_s"), ("llama", "latency", "batch1", "latency_s"),
                    ("dinov3", "throughput", "batch32", "items_per_s"),
                    ("qwen", "throughput", "balanced", "tokens_per_s")]
    llama_tp, llama_lat, dino, _ = rows
    assert (llama_tp["ratio"], llama_tp["lo"], llama_tp["hi"], llama_tp["method"]) == (0.9, 0.8, 0.95, "range")
    assert llama_tp["higher_is_better"] is True and llama_lat["higher_is_better"] is False
    assert llama_tp["label"] == "llama · throughput balanced (tokens/s)"
    assert llama_lat["label"] == "llama · latency batch1 (s)"
    # a single repeat has no interval: point only; a non-PASSED scenario says so in its label
    assert dino["lo"] is None and dino["hi"] is None and dino["ratio"] == 1.01 and dino["n"] == 1
    assert dino["label"].endswith("[INCORRECT]") and dino["status"] == "INCORRECT"


def test_ratio_rows_t_interval_over_rounds_when_values_exist():
    res = _run_results()
    row = plots.ratio_rows_from_results(res)[-1]
    r = res["scenarios"][2]["perf"]["throughput"]["balanced"]["tokens_per_s"]
    expect = stats.rounds_interval(r["baseline"]["values"], r["candidate"]["values"])
    assert row["method"] == "t over rounds"
    assert (row["ratio"], row["lo"], row["hi"]) == (expect["ratio"], expect["lo"], expect["hi"])
    assert row["lo"] <= row["ratio"] <= row["hi"] and row["lo"] > 1.0


def test_a_single_pair_of_engine_processes_draws_no_interval():
    rows = plots.ratio_rows_from_results(_run_results(interleave=1))
    assert rows and all(r["lo"] is None and r["hi"] is None and r["method"] == "single pair" for r in rows)


def test_ratio_rows_of_disturbed_timings_say_so():
    res = _run_results()
    res["scenarios"][2]["perf"]["disturbed"] = ["round 1 baseline: another process used the GPU during this run"]
    labels = [r["label"] for r in plots.ratio_rows_from_results(res)]
    assert labels[-1].endswith("[DISTURBED: GPU shared]") and not labels[0].endswith("[DISTURBED: GPU shared]")


def test_ratio_rows_side_by_side_name_the_engine():
    both = {"engines": ["vllm", "sglang"], "candidate": "triton",
            "runs": [_run_results("vllm"), _run_results("sglang")]}
    rows = plots.ratio_rows_from_results(both)
    assert len(rows) == 8
    assert [r["engine"] for r in rows] == ["vllm"] * 4 + ["sglang"] * 4
    assert rows[0]["label"] == "llama · vllm · throughput balanced (tokens/s)"
    assert rows[4]["label"] == "llama · sglang · throughput balanced (tokens/s)"


def test_op_rows_from_check():
    rows = plots.op_rows_from_check(_check_results())
    assert [r["label"] for r in rows] == ["triton · rms_norm", "triton · silu_and_mul", "wrong · rms_norm [INCORRECT]"]
    rms, silu, wrong = rows
    assert (rms["speedup"], rms["lo"], rms["hi"], rms["shapes"]) == (1.2, 1.1, 1.5, 2)
    assert silu["speedup"] == pytest.approx(math.exp((math.log(2.0) + 3 * math.log(0.5)) / 4))
    assert (silu["lo"], silu["hi"]) == (0.5, 2.0) and sorted(silu["points"]) == [0.5, 2.0]
    assert wrong["speedup"] is None and wrong["lo"] is None and wrong["status"] == "INCORRECT"


def test_op_rows_name_the_workload_when_several():
    res = _check_results()
    res["slots"][1]["workload"] = "qwen"
    assert plots.op_rows_from_check(res)[1]["label"] == "qwen · triton · silu_and_mul"


# ----------------------------------------------------------------------------------------------------------- PNGs

def test_ratio_plot_writes_png(tmp_path):
    rows = [{"label": "a · throughput x (tokens/s)", "ratio": 0.9, "lo": 0.85, "hi": 0.97, "higher_is_better": True},
            {"label": "a · latency y (s)", "ratio": 1.1, "lo": None, "hi": None, "higher_is_better": False},
            {"label": "b", "ratio": math.inf, "lo": 1.0, "hi": math.inf},
            {"label": "c", "ratio": 1.0, "lo": 0.99, "hi": 1.01}]
    path = plots.ratio_plot(rows, str(tmp_path / "sub" / "r.png"), "title", floor=0.03, note="a note")
    assert path == str(tmp_path / "sub" / "r.png") and _is_png(path)


def test_ratio_plot_rejects_a_bad_floor(tmp_path):
    with pytest.raises(ValueError):
        plots.ratio_plot([{"label": "a", "ratio": 1.0, "lo": None, "hi": None}], str(tmp_path / "r.png"), "t",
                         floor=1.5)


def test_op_speedup_plot_writes_png(tmp_path):
    path = plots.op_speedup_plot(plots.op_rows_from_check(_check_results()), str(tmp_path / "o.png"), "title")
    assert _is_png(path)


def test_empty_rows_still_plot(tmp_path):
    assert _is_png(plots.ratio_plot([], str(tmp_path / "r.png"), "nothing"))
    assert _is_png(plots.op_speedup_plot([], str(tmp_path / "o.png"), "nothing"))


def test_write_plots_run_check_compare(tmp_path):
    run_dir, check_dir, cmp_dir = tmp_path / "run", tmp_path / "check", tmp_path / "cmp"
    assert plots.write_plots(_run_results(), str(run_dir), "run") == ["ratios.png"]
    assert _is_png(run_dir / "ratios.png")
    assert plots.write_plots(_check_results(), str(check_dir)) == ["op-speedups.png"]  # kind from results["kind"]
    assert _is_png(check_dir / "op-speedups.png")
    base, head = _run_results(), _run_results()
    base["candidate"] = "passthrough"
    cmp = compare.compare(base, head, noise_floor=0.03)
    assert plots.write_plots(cmp, str(cmp_dir)) == ["deltas.png"]
    assert _is_png(cmp_dir / "deltas.png")
    assert plots.markdown_images(["ratios.png"]) == ["![candidate / baseline ratios with intervals](ratios.png)"]


def test_write_plots_aa_run_and_nothing_to_plot(tmp_path):
    assert plots.write_plots(_run_results(aa=True), str(tmp_path / "aa"), "run") == ["ratios.png"]
    assert _is_png(tmp_path / "aa" / "ratios.png")
    empty = {"engine": "vllm", "scenarios": [{"scenario": "x", "status": "LOAD_ERROR"}]}
    assert plots.write_plots(empty, str(tmp_path / "none"), "run") == []
    assert not os.listdir(tmp_path / "none")
    with pytest.raises(ValueError):
        plots.write_plots(empty, str(tmp_path / "none"), "pie")


def test_importing_fk_adapters_does_not_import_matplotlib():
    import subprocess

    code = "import sys, fk_adapters.plots, fk_adapters.compare; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.stdout.strip() == "False"
