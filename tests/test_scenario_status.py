import json

from fk_adapters import scenario_status
from fk_adapters.results import RunResults


def _write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_newest_run_and_capture_per_scenario_and_engine(tmp_path):
    row = {"scenario": "s", "status": "PASSED", "baseline": {"status": "ok"},
           "perf": {"throughput": {"balanced": {"tokens_per_s": {"baseline": {"median": 1234.0}}}}}}
    _write(tmp_path / "old" / "results.json", {"engine": "vllm", "created": "2026-01-01", "device": "cuda",
                                               "candidate": "triton", "verdict": "PASS", "scenarios": [row]})
    failed = dict(row, baseline={"status": "error", "error": "CUDA out of memory\ntraceback..."})
    _write(tmp_path / "new" / "results.json", {"engine": "vllm", "created": "2026-02-01", "device": "cuda",
                                               "candidate": "triton", "verdict": "FAIL", "scenarios": [failed]})
    _write(tmp_path / "w" / "s" / "sglang.json", {"scenario": "s", "engine": "sglang", "created": "2026-01-05",
                                                  "total_calls": {},
                                                  "slots": {"rms_norm": [{"calls": 3}, {"calls": 4}]}})
    (tmp_path / "junk.json").write_text("[not json")
    seen = scenario_status.collect([str(tmp_path)])
    assert seen[("s", "vllm")].status == "fails: CUDA out of memory"
    assert seen[("s", "sglang")].status == "runs" and seen[("s", "sglang")].slots == {"rms_norm": 7}


def test_a_recorded_capture_failure_is_the_status_until_a_newer_run(tmp_path):
    _write(tmp_path / "s" / "vllm.failed.json", {"kind": "capture-failure", "scenario": "s", "engine": "vllm",
                                                 "created": "2026-03-01", "error": "s: EngineDeadError: no kernel"})
    assert scenario_status.collect([str(tmp_path)])[("s", "vllm")].status == "fails: s: EngineDeadError: no kernel"
    _write(tmp_path / "s" / "vllm.json", {"scenario": "s", "engine": "vllm", "created": "2026-03-02",
                                          "total_calls": {}, "slots": {}})
    assert scenario_status.collect([str(tmp_path)])[("s", "vllm")].status == "runs"


def test_the_last_rate_is_tokens_per_s_or_items_per_s_for_models_without_tokens(tmp_path):
    def run(name, engine, perf):
        row = {"scenario": name, "status": "PASSED", "baseline": {"status": "ok"}, "perf": {"throughput": perf}}
        _write(tmp_path / name / "results.json", {"engine": engine, "created": "2026-01-01", "device": "cpu",
                                                  "candidate": "triton", "verdict": "PASS", "scenarios": [row]})

    run("llm", "vllm", {"balanced": {"tokens_per_s": {"baseline": {"median": 1234.0}},
                                     "output_tokens_per_s": {"baseline": {"median": 99.0}}}})
    run("vit", "transformers", {"images": {"items_per_s": {"baseline": {"median": 56.78}}}})
    seen = scenario_status.collect([str(tmp_path)])
    assert seen[("llm", "vllm")].figures == ["1.23e+03 tok/s (balanced) on cpu", "triton: PASSED"]
    assert seen[("vit", "transformers")].figures == ["56.8 items/s (images) on cpu", "triton: PASSED"]


def test_a_rate_measured_beside_another_gpu_process_says_so(tmp_path):
    perf = {"throughput": {"decode": {"tokens_per_s": {"baseline": {"median": 5129.0}}}},
            "disturbed": ["round 1 baseline: another process used the GPU during this run (pid 7 python3)"]}
    row = {"scenario": "s", "status": "PASSED", "baseline": {"status": "ok"}, "perf": perf}
    _write(tmp_path / "r" / "results.json", {"engine": "vllm", "created": "2026-01-01", "device": "cuda",
                                             "candidate": "slow", "verdict": "PASS", "scenarios": [row]})
    fig = scenario_status.collect([str(tmp_path)])[("s", "vllm")].figures[0]
    assert fig == "5.13e+03 tok/s (decode) on cuda (disturbed: the GPU was shared)"


def test_a_plugin_run_gives_its_verdict_with_the_blended_speed(tmp_path):
    perf = {"throughput": {"balanced": {"tokens_per_s": {"baseline": {"median": 1000.0}, "ratio": 0.8}}},
            "latency": {"batch1": {"latency_s": {"ratio": 1.25}}}}
    row = {"scenario": "s", "status": "PASSED", "baseline": {"status": "ok"}, "perf": perf,
           "correctness": {"passed": True}, "evidence": {"slots": {"rms_norm": {"status": "exercised", "calls": 9}}}}
    _write(tmp_path / "r" / "results.json", {"engine": "vllm", "created": "2026-01-01", "device": "cuda",
                                             "candidate": "triton", "verdict": "PASS", "interleave": 3,
                                             "scenarios": [row]})
    figures = scenario_status.collect([str(tmp_path)])[("s", "vllm")].figures
    assert figures == ["1e+03 tok/s (balanced) on cuda", "triton: PASSED at 0.8x the stock speed (blend)"]
    _write(tmp_path / "r" / "results.json", {"engine": "vllm", "created": "2026-01-02", "device": "cuda", "quick": 32,
                                             "candidate": "triton", "verdict": "PASS", "scenarios": [row]})
    figures = scenario_status.collect([str(tmp_path)])[("s", "vllm")].figures
    assert figures[1] == ("triton: PASSED at 0.8x the stock speed (blend, 1/32 of the requests, one throughput "
                          "repeat; one engine process a side: not significant)")


def test_runs_that_ran_no_kernel_of_their_own_claim_no_speed(tmp_path):
    """A/A runs, the engine's own kernels handed back (passthrough) and disturbed timings: no speed (audit, s53)."""
    perf = {"throughput": {"balanced": {"tokens_per_s": {"baseline": {"median": 1000.0}, "ratio": 1.05}}}}
    row = {"scenario": "s", "status": "PASSED", "baseline": {"status": "ok"}, "perf": perf,
           "correctness": {"passed": True},
           "evidence": {"slots": {"rms_norm": {"status": "exercised", "calls": 9, "engine_own": True}}}}
    run = {"engine": "vllm", "created": "2026-01-01", "device": "cuda", "verdict": "PASS", "interleave": 3}
    _write(tmp_path / "r" / "results.json", dict(run, candidate="passthrough", scenarios=[row]))
    assert scenario_status.collect([str(tmp_path)])[("s", "vllm")].figures[1] == (
        "passthrough: PASSED (no speed claimed: the engine's own kernels)")
    aa = {k: v for k, v in row.items() if k != "evidence"}
    _write(tmp_path / "r" / "results.json", dict(run, candidate="baseline (A/A)", aa=True, scenarios=[aa]))
    assert scenario_status.collect([str(tmp_path)])[("s", "vllm")].figures[1] == (
        "baseline (A/A): PASSED (stock against stock: no speed claimed)")
    del row["evidence"]["slots"]["rms_norm"]["engine_own"]
    row["perf"]["disturbed"] = ["round 1 baseline: another process used the GPU (pid 7)"]
    _write(tmp_path / "r" / "results.json", dict(run, candidate="triton", scenarios=[row]))
    assert scenario_status.collect([str(tmp_path)])[("s", "vllm")].figures[1] == (
        "triton: PASSED (no speed claimed: disturbed)")


def test_a_verdict_says_whether_a_reference_or_the_fixed_thresholds_alone_judged_it():
    def row(status, **correctness):
        return {"status": status, "correctness": {"dtype": "bfloat16", **correctness}}

    assert scenario_status.verdict(row("PASSED", fixed={"passed": False}, reference={"passed": True})) == (
        "PASSED (against a float32 run)")
    assert scenario_status.verdict(row("INCORRECT", fixed={"passed": False}, reference_error="OOM")) == (
        "INCORRECT (fixed thresholds; no float32 reference could be made)")
    assert scenario_status.verdict(row("INCORRECT")) == "INCORRECT (fixed thresholds; run before fk's float32 check)"
    assert scenario_status.verdict(row("PASSED")) == "PASSED"  # within the fixed thresholds: nothing else was asked
    assert scenario_status.verdict(row("NOT_EXERCISED", reference={"passed": True})) == "NOT_EXERCISED"
    f32 = {"status": "PASSED", "correctness": {"kind": "outputs", "dtype": "float32", "reference": {"tensors": 6}}}
    assert scenario_status.verdict(f32) == "PASSED (against a float64 forward)"
    f32["correctness"]["reference"]["tensors"] = 0  # a reference too far from the baseline to judge
    assert scenario_status.verdict(f32) == "PASSED"
    f32["correctness"] = {"kind": "outputs", "dtype": "float32", "reference_error": "RuntimeError: no float64 kernel"}
    assert scenario_status.verdict(dict(f32, status="INCORRECT")) == (
        "INCORRECT (fixed thresholds; no float64 reference could be made)")


def test_a_float32_run_that_cannot_judge_makes_the_verdict_inconclusive_also_in_earlier_results():
    tokens = {"requests": 32, "parted_b": 32, "parted_c": 32, "allowed_c": 40}
    old = {"status": "PASSED", "correctness": {"dtype": "bfloat16", "reference": {"passed": True, "tokens": tokens}}}
    assert scenario_status.verdict(old) == (
        "INCONCLUSIVE (was PASSED; fk's later rule: the float32 run cannot judge: the stock run itself parts from it "
        "outside a near tie in 32/32 requests, so no candidate, right or wrong, "
        "could part in more than the 40 allowed)")
    new = {"status": "INCONCLUSIVE", "correctness": {"inconclusive": "cannot judge: ..."}}
    assert scenario_status.verdict(new) == "INCONCLUSIVE (the float32 run cannot judge: ...)"
    # outputs a bf16 model's rounding dominates (fk46-efficientnetv2's logits 105% off float32), PASSED by the ratio
    logits = {"rel_mean": 0.742, "cosine": 0.73, "finite": True,
              "reference": {"err_b_mean_abs": 1.05, "ref_mean_abs": 1.0, "ratio_mean_abs": 0.716}}
    out = {"status": "PASSED", "correctness": {"kind": "outputs", "dtype": "bfloat16", "outputs": {"logits": logits},
                                               "reference": {"tensors": 1}}}
    assert scenario_status.verdict(out).startswith(
        "INCONCLUSIVE (was PASSED; fk's later rule: the float32 run cannot judge: the stock run itself lies over 10% "
        "off it (logits 105%: ")
    logits["reference"]["err_b_mean_abs"] = 0.05  # a sane model: the ratio rule judged
    assert scenario_status.verdict(out) == "PASSED (against a float32 run)"
    judged = dict(tokens, parted_b=19, allowed_c=27)  # Mixtral in vLLM: the float32 run still judges
    assert scenario_status.verdict({"status": "PASSED", "correctness": {"reference": {"tokens": judged}}}) == (
        "PASSED (against a float32 run)")


def test_each_plugin_keeps_its_newest_verdict_beside_the_newest_run(tmp_path):
    def run(where, candidate, created, status):
        row = {"scenario": "s", "status": status, "baseline": {"status": "ok"},
               "perf": {"throughput": {"b": {"tokens_per_s": {"baseline": {"median": 10.0}}}}}}
        _write(tmp_path / where / "results.json", {"engine": "transformers", "created": created, "device": "cuda",
                                                   "candidate": candidate, "verdict": "?", "scenarios": [row]})

    run("quick/triton", "triton", "2026-01-01", "INCORRECT")
    run("full/triton", "triton", "2026-01-03", "PASSED")
    run("full/wrong", "wrong", "2026-01-04", "INCORRECT")
    run("old/wrong", "wrong", "2026-01-02", "PASSED")
    figures = scenario_status.collect([str(tmp_path)])[("s", "transformers")].figures
    assert figures == ["10 tok/s (b) on cuda", "triton: PASSED", "wrong: INCORRECT"]


def test_a_plugin_none_of_whose_kernels_ran_is_not_shown_as_passed_or_timed(tmp_path):
    perf = {"throughput": {"b": {"items_per_s": {"baseline": {"median": 10.0}, "ratio": 1.22}}}}
    row = {"scenario": "s", "status": "PASSED", "baseline": {"status": "ok"}, "perf": perf,
           "evidence": {"slots": {"rms_norm": {"status": "n/a", "calls": 0}}}}
    _write(tmp_path / "r" / "results.json", {"engine": "transformers", "created": "2026-01-01", "device": "cuda",
                                             "candidate": "wrong", "verdict": "PASS", "scenarios": [row]})
    figures = scenario_status.collect([str(tmp_path)])[("s", "transformers")].figures
    assert figures[1] == "wrong: not exercised: ran the stock model (no layer of the model routes to rms_norm)"
    row["status"] = "NOT_APPLICABLE"  # what fk run gives such a run now (PASSED above: results made before)
    _write(tmp_path / "r" / "results.json", {"engine": "transformers", "created": "2026-01-01", "device": "cuda",
                                             "candidate": "wrong", "verdict": "PASS", "scenarios": [row]})
    figures = scenario_status.collect([str(tmp_path)])[("s", "transformers")].figures
    assert figures[1] == "wrong: not exercised: ran the stock model (no layer of the model routes to rms_norm)"
    row["status"], row["correctness"] = "PASSED", {"passed": True}
    row["evidence"]["slots"]["rms_norm"]["status"] = "exercised"
    _write(tmp_path / "r" / "results.json", {"engine": "transformers", "created": "2026-01-01", "device": "cuda",
                                             "candidate": "wrong", "verdict": "PASS", "scenarios": [row]})
    figures = scenario_status.collect([str(tmp_path)])[("s", "transformers")].figures
    assert figures[1] == "wrong: PASSED at 1.22x the stock speed (blend; one engine process a side: not significant)"


def test_a_not_proven_run_is_not_credited_a_speed():
    from fk_adapters.scenario_status import _plugin_figure

    row = {"scenario": "s", "status": "NOT_PROVEN", "correctness": {"passed": True},
           "evidence": {"slots": {"rms_norm": {"status": "not proven", "calls": 9}}},
           "perf": {"throughput": {"w": {"tokens_per_s": {"ratio": 1.2}}}, "latency": {}}}
    assert _plugin_figure(row, RunResults()) == "NOT_PROVEN (no speed claimed: not proven)"
