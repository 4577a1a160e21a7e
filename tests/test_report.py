import json

from fk_adapters.cli.main import main
from fk_adapters.report import render


def results(status="PASSED", verdict="PASS"):
    ratio = {"ratio": 1.02, "pair_min": 0.99, "pair_max": 1.05,
             "baseline": {"n": 3, "median": 100.0, "min": 98.0, "max": 103.0, "rel_spread": 0.05},
             "candidate": {"n": 3, "median": 102.0, "min": 100.0, "max": 104.0, "rel_spread": 0.04}}
    return {"fk_version": "0", "created": "now", "command": "fk run --plugins p", "engine": "vllm",
            "engine_version": "0.32.0", "device": "cpu", "mode": "eager", "candidate": "p", "plugins": ["p"],
            "aa": False, "verdict": verdict, "problems": [] if verdict == "PASS" else ["x: INCORRECT"],
            "thresholds": {"float32": {"max_abs": 2e-3, "mean_abs": 2e-4}},
            "coverage": {"rms_norm": {"plugin": "p", "exercised_in": ["x"], "not_exercised_in": [], "n/a_in": []}},
            "scenarios": [{"scenario": "x", "status": status, "dtype": "float32", "failures": [],
                           "baseline": {"startup_s": 1.0}, "candidate": {"startup_s": 1.2},
                           "correctness": {"tokens": {"identical": 3, "near_ties": 1, "unexplained": [], "requests": 4},
                                           "teacher_forced": {"max_abs": 1e-6, "mean_abs": 1e-7}},
                           "evidence": {"slots": {"rms_norm": {
                               "plugin": "p", "kernel": "k", "entered": ["RMSNorm"], "layers": 5, "calls": 42,
                               "profiler_hits": 0, "profiled": False, "status": "exercised", "proof": "42 calls"}},
                               "processes": [{"pid": 1, "role": "worker"}], "workers": [{"pid": 1}]},
                           "perf": {"throughput": {"w": {"tokens_per_s": ratio, "output_tokens_per_s": ratio}},
                                    "latency": {"b1": {"latency_s": ratio}}}}]}


def test_render_shows_verdict_evidence_and_ratios():
    md = render(results())
    assert md.splitlines()[2].startswith("**PASS**")
    assert "| x " in md and "42 calls" in md and "1.020 [0.990, 1.050]" in md and "3 / 1 / 0 of 4" in md


def test_the_headline_counts_scenarios_where_no_slot_applied_apart_from_passes():
    md = render(results(status="NOT_APPLICABLE"))
    assert md.splitlines()[2] == ("**PASS**: 0/1 scenarios passed, 1 not applicable "
                                  "(no layer routes to a selected slot: the stock model ran)")


def test_fk_report_command(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results("INCORRECT", "FAIL")))
    assert main(["report", str(path), "-o", str(tmp_path / "r.md")]) == 0
    assert "**FAIL**" in (tmp_path / "r.md").read_text()


def test_fk_report_to_a_file_draws_the_run_plots_beside_it(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results()))
    assert main(["report", str(path), "-o", str(tmp_path / "r.md")]) == 0
    assert "](ratios.png)" in (tmp_path / "r.md").read_text() and (tmp_path / "ratios.png").exists()


def test_side_by_side_report_for_two_engines(tmp_path):
    a, b = results(), results("INCORRECT", "FAIL")
    b["engine"], b["engine_version"] = "sglang", "0.5.15"
    combined = {"engines": ["vllm", "sglang"], "candidate": "p", "verdict": "FAIL", "runs": [a, b]}
    md = render(combined)
    assert md.startswith("# fk run: p on vllm 0.32.0 and sglang 0.5.15")
    assert "vllm 0.32.0: status" in md and "sglang 0.5.15: status" in md
    assert "| x          | PASSED" in md and "INCORRECT" in md and md.count("## fk run:") == 2
    path = tmp_path / "combined.json"
    path.write_text(json.dumps(combined))
    assert main(["report", str(path)]) == 0


def test_side_by_side_says_whether_each_engine_ran_the_same_plugin_code():
    a, b = results(), results()
    b["engine"], b["engine_version"] = "sglang", "0.5.15"
    for r, digest in ((a, "ab" * 32), (b, "ab" * 32)):
        r["scenarios"][0]["plugin_code"] = {"p": {"dist": "fk-p", "version": "1.0", "source_sha256": digest}}
    combined = {"engines": ["vllm", "sglang"], "candidate": "p", "verdict": "PASS", "runs": [a, b]}
    assert "p: the same code in every engine" in render(combined)
    b["scenarios"][0]["plugin_code"]["p"]["source_sha256"] = "cd" * 32
    assert "p: **NOT the same code in every engine**" in render(combined)


def test_a_token_verdict_rejudged_by_its_float32_run_shows_both_verdicts():
    res = results()
    row = res["scenarios"][0]
    row["dtype"] = "bfloat16"
    summary = ("fixed thresholds: failed (teacher-forced max |Δlogprob| 0.614 > 0.5); float32 reference: passed "
               "(mean ratio 1.14 (<= 1.8), ...)")
    row["correctness"].update(fixed={"passed": False, "failures": ["teacher-forced max |Δlogprob| 0.614 > 0.5"]},
                              summary=summary, reference={
                                  "teacher_forced": {"ratio_mean_abs": 1.14, "ratio_max_abs": 1.36},
                                  "tokens": {"parted_c": 1, "parted_b": 3}, "passed": True,
                                  "rule": {"ratio_mean_abs": 1.8, "ratio_max_abs": 2.5, "slack": 1e-3,
                                           "extra_partings": 0.25, "min_partings": 2}})
    row["notes"] = [summary]
    md = render(res)
    assert "vs fp32 run: err_c / err_b mean (max), parted c/b" in md and "| 1.14 (1.36), 1/3 " in md
    assert "get a float32 run of the stock engine (same job) as the reference" in md and "at most 1.8 x" in md
    assert f"- **x**: {summary}" in md
    del row["correctness"]["reference"]
    row["correctness"]["reference_error"] = "the float32 run ended error: boom"
    md = render(res)
    assert "no float32 run (see notes)" in md and "as the reference" not in md


def test_disturbed_timings_are_flagged_above_the_performance_table():
    res = results()
    res["scenarios"][0]["perf"]["disturbed"] = ["baseline: another process used the GPU during this run (pid 1)"]
    md = render(res)
    perf = md[md.index("## Performance"):]
    assert "**Disturbed timings: another process used the GPU during timed engine runs of x." in perf
    assert "| x **(disturbed)** | throughput w" in perf
    assert "**Disturbed" not in render(results())


def test_a_reused_baseline_says_how_old_it_is():
    from fk_adapters.report import _ages

    assert _ages([{"baseline": {"reused_age_s": 922}}]) == " (made 15 min earlier on this machine hold)"
    assert _ages([{"baseline": {}}]) == ""


def crashed(evidence=True):
    """A candidate out of memory in its throughput phase: its kept correctness and load records (runner.ab)."""
    res = results("RUNTIME_ERROR", "FAIL")
    row = res["scenarios"][0]
    del row["perf"]
    res["coverage"] = {}
    row["failures"] = ["candidate: EngineDeadError: (first logged error: OutOfMemoryError: CUDA out of memory)"]
    row["candidate"].update(status="error", log_tail="torch.OutOfMemoryError: CUDA out of memory",
                            kept_from_partial=["probe_after_correctness", "teacher_logprobs", "tokens"])
    row["correctness"]["measured_before_failure"] = True
    row["evidence"] = {"slots": {"rms_norm": {
        "plugin": "p", "kernel": "k", "entered": ["RMSNorm"], "layers": 5, "calls": 40, "profiler_hits": 0,
        "profiled": False, "status": "exercised", "proof": "40 calls in the worker(s)"}},
        "processes": [{"pid": 10, "role": "LLM", "installed": ["rms_norm"]},
                      {"pid": 11, "role": "EngineCore_DP0", "inherited_from": 10, "installed": ["rms_norm"]},
                      {"pid": 12, "role": "VllmWorker-0", "installed": ["rms_norm"]}],
        "workers": [{"pid": 12, "plugins_loaded": True}], "load_errors": [], "as_of": "the end of correctness"}
    if not evidence:
        del row["evidence"], row["correctness"]["measured_before_failure"]
    return res


def test_a_crashed_run_shows_what_it_measured_and_its_load_records():
    md = render(crashed())
    assert "| x          | RUNTIME_ERROR (figures measured before the failure) |" in md
    assert "3 / 1 / 0 of 4" in md  # the kept greedy comparison beside the failure
    assert "exercised (as of the end of correctness)" in md and "40 calls in the worker(s)" in md
    assert ("- x (RUNTIME_ERROR; worker probe kept: the end of correctness): 10 (LLM; installed rms_norm), "
            "11 (EngineCore_DP0, forked; installed rms_norm), 12 (VllmWorker-0; installed rms_norm); "
            "model runs in worker pid(s) 12") in md
    assert ("the candidate run ended error; kept from the phases it finished: probe_after_correctness, "
            "teacher_logprobs, tokens") in md
    assert "No plugin kernel was installed" not in md and "none; model runs in worker pid(s) ?" not in md


def test_a_crashed_run_of_an_older_fk_does_not_claim_that_no_plugin_was_installed():
    md = render(crashed(evidence=False))
    assert "No plugin kernel was installed" not in md and "none; model runs in worker pid(s) ?" not in md
    assert "These results hold no plugin load records for x (RUNTIME_ERROR)" in md
    assert "- x: no load records in these results (the run ended RUNTIME_ERROR; see `logs/x/candidate/loads/`)" in md


def test_tensor_parallel_evidence_is_tabled_per_rank():
    from fk_adapters.report import _rank_lines

    ranks = {"0": {"reported": True, "layers": 5, "calls": 14}, "1": {"reported": False}}
    rows = [{"scenario": "s", "evidence": {"slots": {"rms_norm": {"ranks": ranks}, "gemm": {}}}}]
    text = "\n".join(_rank_lines(rows))
    assert "Per tensor-parallel rank" in text and "no evidence" in text and text.count("rms_norm") == 2
    assert _rank_lines([{"scenario": "s", "evidence": {"slots": {"gemm": {"calls": 3}}}}]) == []


def test_the_header_names_the_gpu_models_the_run_saw():
    res = dict(results(), device="cuda", gpus=["NVIDIA H200", "NVIDIA H200"])
    assert "- device: cuda (2x NVIDIA H200), mode: eager" in render(res)
    assert "- device: cpu, mode: eager" in render(results())  # none recorded: nothing added


def test_an_aa_floor_wider_than_compares_max_margin_says_so():
    from fk_adapters.report import _noise_floor_lines

    widest = {"scenario": "s", "kind": "latency", "workload": "batch32", "ratio": 1.09, "lo": 0.454, "hi": 2.615,
              "n": 3}
    wide = "\n".join(_noise_floor_lines({"value": 1.6145, "intervals": 5, "widest": widest}))
    assert "**161.45%**" in wide and "wider than 10%" in wide and "too noisy" in wide
    narrow = "\n".join(_noise_floor_lines({"value": 0.016, "intervals": 5, "widest": dict(widest, lo=0.99, hi=1.016)}))
    assert "**1.60%**" in narrow and "wider than" not in narrow


def test_the_header_says_a_short_warmup():
    run = results()
    assert "warm-up pass" not in render(run)
    run["warmup_share"] = 0.25
    assert "each throughput warm-up pass over the first 25% of its requests" in render(run)
