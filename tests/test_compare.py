import copy

import pytest

from fk_adapters import compare, compare_report, metrics, stats

BASE_TPUT = [100.0, 101.0, 99.5, 100.5, 100.2, 99.8]
BASE_LAT = [0.200, 0.201, 0.199, 0.2005, 0.2002, 0.1998]
NOISE = [0.004, -0.003, 0.002, -0.001, 0.003, -0.004]  # per repeat, on the candidate: intervals are not points


def scaled(values, factor):
    return [x * factor * (1 + e) for x, e in zip(values, NOISE)]


def perf_entry(base, cand, values=True):
    """What metrics.ratio stores, as if from interleaved repeats (values=True) or from a file written before
    per-repeat values were stored (values=False)."""
    r = metrics.ratio(base, cand)
    if values:
        r["paired"] = True
    else:
        del r["baseline"]["values"], r["candidate"]["values"]
    return r


def row(name="s1", status="PASSED", tput=1.0, lat=1.0, slots=None, max_abs=0.01, values=True, failures=()):
    """A scenario row: the candidate's throughput is tput x the baseline's, its latency lat x the baseline's."""
    slots = {"rms_norm": ("exercised", 42), "silu_and_mul": ("exercised", 21)} if slots is None else slots
    return {"scenario": name, "dtype": "bfloat16", "status": status, "failures": list(failures),
            "baseline": {}, "candidate": {},
            "correctness": {"dtype": "bfloat16", "thresholds": {"max_abs": 0.5, "mean_abs": 0.04},
                            "tokens": {"requests": 8, "identical": 8, "near_ties": 0, "unexplained": []},
                            "teacher_forced": {"positions": 100, "max_abs": max_abs, "mean_abs": max_abs / 10},
                            "passed": status == "PASSED", "failures": list(failures)},
            "evidence": {"slots": {s: {"plugin": "p", "kernel": f"p_{s}", "status": st, "calls": calls, "layers": 4,
                                       "profiled": False, "profiler_hits": 0} for s, (st, calls) in slots.items()}},
            "perf": {"throughput": {"balanced": {
                         "tokens_per_s": perf_entry(BASE_TPUT, scaled(BASE_TPUT, tput), values),
                         "output_tokens_per_s": perf_entry(BASE_TPUT, scaled(BASE_TPUT, tput), values)}},
                     "latency": {"batch1": {"latency_s": perf_entry(BASE_LAT, scaled(BASE_LAT, lat), values)}}}}


def results(*rows, aa=False, engine="vllm", candidate="p", interleave=6):
    """A results file; its perf entries say "paired" (interleaved rounds), so by default it interleaved 6 rounds."""
    return {"fk_version": "0", "created": "now", "command": "fk run", "engine": engine, "engine_version": "0.26.0",
            "interleave": interleave,
            "device": "cuda", "host": "h", "mode": "compiled", "candidate": "baseline (A/A)" if aa else candidate,
            "plugins": [] if aa else [candidate], "aa": aa, "quick": False, "verdict": "PASS", "problems": [],
            "scenarios": list(rows) or [row()]}


def test_identical_runs_pass_with_every_delta_unchanged():
    r = results(row("s1"), row("s2"))
    cmp = compare.compare(r, copy.deepcopy(r), threshold=0.02)
    assert cmp["verdict"] == "PASS" and cmp["problems"] == []
    assert cmp["verdict_line"] == "**PASS**: 0 regressions, 0 faster, 4 unchanged; correctness ok in 2/2 scenarios"
    assert len(cmp["perf"]) == 4  # one primary metric per workload: tokens/s and latency, not output tokens/s too
    for p in cmp["perf"]:
        assert p["delta"]["method"] == "t over rounds" and p["delta"]["ratio"] == pytest.approx(1.0)
        assert p["delta"]["lo"] < 1.0 < p["delta"]["hi"] and p["delta"]["hi"] - p["delta"]["lo"] < 0.02


def test_a_throughput_regression_fails_and_a_gain_passes():
    base = results(row(tput=1.10))
    slower = compare.compare(base, results(row(tput=1.03)), threshold=0.02)  # HEAD's kernel gains 3% instead of 10%
    tp = next(p for p in slower["perf"] if p["kind"] == "throughput")
    assert tp["delta"]["ratio"] == pytest.approx(1.03 / 1.10, rel=0.005)
    assert tp["delta"]["lo"] < tp["delta"]["ratio"] < tp["delta"]["hi"] < 0.98
    assert tp["verdict"] == "slower" and tp["regression"]
    assert slower["verdict"] == "FAIL" and slower["summary"]["regressions"] == 1
    assert slower["verdict_line"].startswith("**FAIL**: 1 regression, 0 faster, 1 unchanged")
    assert any("throughput balanced slower" in p for p in slower["problems"])
    faster = compare.compare(results(row(tput=1.03)), results(row(tput=1.10)), threshold=0.02)
    assert faster["verdict"] == "PASS" and faster["summary"]["faster"] == 1
    # a noise floor wider than the change: not significant either way
    assert compare.compare(base, results(row(tput=1.03)), noise_floor=0.10)["verdict"] == "PASS"
    assert compare.compare(base, results(row(tput=1.03)), threshold=0.10)["summary"]["regressions"] == 0


def test_latency_is_lower_is_better():
    cmp = compare.compare(results(row(lat=1.0)), results(row(lat=1.05)), threshold=0.02)
    lat = next(p for p in cmp["perf"] if p["kind"] == "latency")
    assert lat["delta"]["lo"] > 1.02 and lat["verdict"] == "slower" and cmp["verdict"] == "FAIL"
    cmp = compare.compare(results(row(lat=1.05)), results(row(lat=1.0)), threshold=0.02)
    assert next(p for p in cmp["perf"] if p["kind"] == "latency")["verdict"] == "faster" and cmp["verdict"] == "PASS"


def test_a_correctness_regression_fails():
    head = results(row(status="INCORRECT", max_abs=0.9, failures=["teacher-forced max |Δlogprob| 0.9 > 0.5"]))
    cmp = compare.compare(results(row()), head)
    sc = cmp["scenarios"][0]
    assert cmp["verdict"] == "FAIL" and not sc["correct"] and sc["status_changed"]
    assert sc["base"]["max_abs_dlogprob"] == 0.01 and sc["head"]["max_abs_dlogprob"] == 0.9
    assert cmp["summary"]["correct"] == 0 and "correctness ok in 0/1 scenarios" in cmp["verdict_line"]
    assert "PASSED -> INCORRECT" in cmp["problems"][0] and "0.9 > 0.5" in cmp["problems"][0]
    # a scenario failing in BASE already still fails HEAD
    assert compare.compare(head, copy.deepcopy(head))["verdict"] == "FAIL"


def test_a_scenario_where_no_slot_applies_is_not_a_correctness_failure():
    stock = row(status="NOT_APPLICABLE", slots={"rms_norm": ("n/a", 0)})
    stock["correctness"]["passed"] = True
    cmp = compare.compare(results(copy.deepcopy(stock)), results(stock))
    assert cmp["verdict"] == "PASS" and cmp["scenarios"][0]["correct"] and cmp["problems"] == []


def test_a_kernel_that_stopped_running_is_flagged_and_fails():
    head = results(row(slots={"rms_norm": ("exercised", 42), "silu_and_mul": ("not exercised", 0)}))
    cmp = compare.compare(results(row()), head)
    sc = cmp["scenarios"][0]
    assert sc["head_status"] == "PASSED" and sc["stopped"] == ["silu_and_mul"] and not sc["correct"]
    assert cmp["verdict"] == "FAIL" and cmp["summary"]["stopped_kernels"] == 1
    assert "silu_and_mul stopped running" in cmp["problems"][0] and "21 calls" in cmp["problems"][0]
    gone = compare.compare(results(row()), results(row(slots={"rms_norm": ("exercised", 42)})))
    assert gone["scenarios"][0]["kernels"][1]["change"] == "removed" and gone["verdict"] == "FAIL"
    started = compare.compare(results(row(slots={"rms_norm": ("n/a", 0)})), results(row()))
    assert started["verdict"] == "PASS" and {k["change"] for k in started["scenarios"][0]["kernels"]} == {"started"}


def test_without_per_repeat_values_the_interval_is_the_range_bound():
    base, head = results(row(tput=1.10, values=False)), results(row(tput=1.03, values=False))
    cmp = compare.compare(base, head)
    tp = next(p for p in cmp["perf"] if p["kind"] == "throughput")
    b = base["scenarios"][0]["perf"]["throughput"]["balanced"]["tokens_per_s"]
    h = head["scenarios"][0]["perf"]["throughput"]["balanced"]["tokens_per_s"]
    assert tp["delta"]["method"] == "range"
    assert tp["delta"]["lo"] == pytest.approx(h["pair_min"] / b["pair_max"])
    assert tp["delta"]["hi"] == pytest.approx(h["pair_max"] / b["pair_min"])
    assert tp["base"]["lo"] == b["pair_min"] and tp["head"]["hi"] == h["pair_max"]
    assert any("per-repeat values are missing from both files" in x for x in cmp["limitations"])


def test_noise_floor_from_an_aa_file():
    aa_row = row(tput=1.0, lat=1.0)
    aa_row["perf"]["latency"]["batch1"]["latency_s"] = perf_entry(BASE_LAT, scaled(BASE_LAT, 1.04))
    aa = results(aa_row, aa=True)
    floor = compare.noise_floor_from_aa(aa, "aa.json")
    assert len(floor["intervals"]) == 2
    assert floor["value"] == pytest.approx(max(iv["half_width"] for iv in floor["intervals"]))
    assert 0.035 < floor["value"] < 0.06  # the A/A's 4% latency offset sets it
    # the floor as one number (--noise-floor): a 3.6% throughput drop sits within the latency's 4% reach
    cmp = compare.compare(results(row(tput=1.10)), results(row(tput=1.06)), noise_floor=floor["value"])
    assert cmp["margin"] == floor["value"] and cmp["verdict"] == "PASS"
    # the A/A file (--aa): throughput is held to its own A/A reach, which is tight here, so the drop is caught
    cmp = compare.compare(results(row(tput=1.10)), results(row(tput=1.06)), noise_floor=floor)
    tput = [r for r in cmp["perf"] if r["kind"] == "throughput"]
    lat = [r for r in cmp["perf"] if r["kind"] == "latency"]
    assert cmp["margin"] == floor["value"] and cmp["verdict"] == "FAIL"
    assert all(r["margin"] < floor["value"] for r in tput) and all(r["margin"] == floor["value"] for r in lat)
    with pytest.raises(compare.CompareError, match="not an A/A run"):
        compare.noise_floor_from_aa(results(row()), "x.json")


def aa_results(tput=1.0):
    """An A/A run's results: no plugin, so its rows carry no kernel evidence."""
    r = row(tput=tput)
    r["evidence"] = None
    return results(r, aa=True)


def test_an_aa_base_stands_for_main_without_the_kernel():
    aa = aa_results()
    cmp = compare.compare(aa, results(row(tput=0.97)), threshold=0.01, noise_floor=compare.noise_floor_from_aa(aa))
    tp = next(p for p in cmp["perf"] if p["kind"] == "throughput")
    assert tp["delta"]["ratio"] == pytest.approx(0.97, rel=0.005) and tp["verdict"] == "slower"
    assert cmp["verdict"] == "FAIL"
    assert any(x.startswith("BASE is an A/A run") for x in cmp["limitations"])
    assert any("noise floor comes from BASE itself" in x for x in cmp["limitations"])
    assert {k["change"] for k in cmp["scenarios"][0]["kernels"]} == {"started"}


def test_an_aa_pair_is_unchanged_and_a_drifted_one_is_caught():
    aa = aa_results()
    pair = compare.compare(aa, aa_results(), threshold=0.01)
    assert pair["verdict"] == "PASS" and pair["summary"]["unchanged"] == 2
    assert any(x.startswith("BASE and HEAD are both A/A runs") for x in pair["limitations"])
    drifted = compare.compare(aa, aa_results(tput=0.95), threshold=0.01)  # the check can fail
    assert drifted["verdict"] == "FAIL" and drifted["summary"]["regressions"] == 1


def test_an_aa_head_after_a_kernel_run_fails_on_the_kernels_it_dropped():
    cmp = compare.compare(results(row()), aa_results())
    assert cmp["verdict"] == "FAIL" and cmp["summary"]["stopped_kernels"] == 2  # rms_norm and silu_and_mul
    assert any(x.startswith("HEAD is an A/A run") for x in cmp["limitations"])


def test_inputs_that_cannot_be_compared():
    with pytest.raises(compare.CompareError, match="share no scenario"):
        compare.compare(results(row("a")), results(row("b")))
    with pytest.raises(compare.CompareError, match="one engine"):
        compare.compare(results(row()), results(row(), engine="sglang"))
    with pytest.raises(compare.CompareError, match="not an fk run results file"):
        compare.compare({"a": 1}, results(row()))
    with pytest.raises(compare.CompareError, match="side-by-side"):
        compare.compare(results(row()), {"runs": []})
    cmp = compare.compare(results(row("a"), row("b")), results(row("b"), row("c")))
    assert cmp["only_base"] == ["a"] and cmp["only_head"] == ["c"] and cmp["summary"]["scenarios"] == 1


def test_a_single_repeat_is_judged_on_its_point_and_says_so():
    one = {"throughput": {"w": {"tokens_per_s": perf_entry([100.0], [110.0])}}, "latency": {}}
    two = {"throughput": {"w": {"tokens_per_s": perf_entry([100.0], [90.0])}}, "latency": {}}
    b, h = row(), row()
    b["perf"], h["perf"] = one, two
    cmp = compare.compare(results(b), results(h))
    d = cmp["perf"][0]["delta"]
    assert d["note"] == stats.NO_INTERVAL and d["lo"] == d["hi"] == pytest.approx(0.9 / 1.1)
    assert cmp["perf"][0]["verdict"] == "slower" and "(n=1: no interval)" in compare_report.to_markdown(cmp)


def test_a_token_verdict_rejudged_by_its_float32_run_shows_its_ratio():
    head = results(row(max_abs=0.7))
    ref = {"teacher_forced": {"ratio_mean_abs": 1.14, "ratio_max_abs": 1.36}, "tokens": {}, "passed": True}
    head["scenarios"][0]["correctness"].update(fixed={"passed": False, "failures": ["max 0.7 > 0.5"]}, reference=ref)
    cmp = compare.compare(results(row()), head)
    h = cmp["scenarios"][0]["head"]
    assert (h["logprob_ref_ratio"], h["logprob_ref_ratio_max"], h["fixed_passed"]) == (1.14, 1.36, False)
    assert "logprob_ref_ratio" not in cmp["scenarios"][0]["base"] and cmp["verdict"] == "PASS"
    assert "| - → 1.14 " in compare_report.to_markdown(cmp)


def test_a_workload_whose_base_or_head_timings_were_disturbed_is_not_compared():
    why = "round 1 baseline: another process used the GPU during this run (pid 1234 python3): not comparable"
    for side in ("BASE", "HEAD"):
        b_row, h_row = row("s1", tput=1.10), row("s1", tput=0.5)  # HEAD's throughput halved, as on the H100
        (b_row if side == "BASE" else h_row)["perf"]["disturbed"] = [why]
        cmp = compare.compare(results(b_row, row("s2")), results(h_row, row("s2")))
        s1 = [r for r in cmp["perf"] if r["scenario"] == "s1"]
        assert all(r["verdict"] == "not compared" and r["delta"] is None and not r["regression"] for r in s1)
        assert cmp["summary"]["regressions"] == 0 and cmp["summary"]["unchanged"] == 2
        assert cmp["summary"]["not_compared"] == 2 and ", 2 not compared" in cmp["verdict_line"]
        assert any(n.startswith("performance not compared: ") and why in n for n in cmp["scenarios"][0]["notes"])
        assert any("another process used the GPU" in x for x in cmp["limitations"])
        assert cmp["verdict"] == "INCOMPLETE" and "s1: no performance compared" in cmp["verdict_line"]
    # undisturbed, HEAD's halved throughput is a regression
    assert compare.compare(results(row("s1", tput=1.10)), results(row("s1", tput=0.5)))["summary"]["regressions"] == 1


def test_a_disturbed_aa_scenario_is_left_out_of_the_noise_floor():
    noisy = row("s1", tput=1.0)
    noisy["perf"]["throughput"]["balanced"]["tokens_per_s"] = perf_entry(BASE_TPUT, scaled(BASE_TPUT, 0.5))
    noisy["perf"]["disturbed"] = ["baseline: another process used the GPU during this run (pid 1)"]
    floor = compare.noise_floor_from_aa(results(noisy, row("s2"), aa=True), "aa.json")
    assert floor["disturbed"] == ["s1"] and {iv["scenario"] for iv in floor["intervals"]} == {"s2"}
    assert floor["value"] < 0.05
    with pytest.raises(compare.CompareError, match="left out, another process used the GPU: s1"):
        compare.noise_floor_from_aa(results(noisy, aa=True), "aa.json")


def test_a_scenario_whose_base_measured_nothing_is_incomplete_not_a_pass():
    """As on the H100 (session 7): BASE ended RUNTIME_ERROR without timings; HEAD passed. Nothing was compared."""
    crashed = dict(row("s1", status="RUNTIME_ERROR", failures=["candidate: engine core initialization failed"]),
                   perf={})
    cmp = compare.compare(results(crashed), results(row("s1", tput=0.97)))
    assert cmp["verdict"] == "INCOMPLETE" and cmp["summary"]["regressions"] == 0
    assert cmp["verdict_line"].startswith("**INCOMPLETE**")
    assert "s1: no performance compared (BASE RUNTIME_ERROR: no measurements)" in cmp["verdict_line"]
    assert compare_report.to_markdown(cmp).startswith("**INCOMPLETE**")
    ok = compare.compare(results(row("s1")), results(row("s1")))  # measured on both sides
    assert ok["verdict"] == "PASS" and not ok["uncompared"]


def test_a_do_nothing_plugins_single_repeats_never_read_faster_against_an_aa_of_single_repeats():
    """Session 40's CPU check: an A/A of one repeat read 0.706 (throughput) and 1.050 (latency), the passthrough
    1.071 and 0.978; their quotients (1.517, 0.931) cleared the A/A's own reach (29.4%, 5%) though nothing ran
    faster. A point is a quotient of two single-pair ratios: it must clear the margin compounded over both."""
    aa, passthrough = row(), row()
    aa["perf"] = {"throughput": {"w": {"tokens_per_s": perf_entry([897.2], [633.6])}},
                  "latency": {"b1": {"latency_s": perf_entry([1.0], [1.05])}}}
    passthrough["perf"] = {"throughput": {"w": {"tokens_per_s": perf_entry([573.9], [614.8])}},
                           "latency": {"b1": {"latency_s": perf_entry([1.0], [0.978])}}}
    floor = {"value": 0.294, "source": "aa", "intervals": [
        {"scenario": "s1", "kind": "throughput", "workload": "w", "metric": "tokens_per_s", "half_width": 0.294},
        {"scenario": "s1", "kind": "latency", "workload": "b1", "metric": "latency_s", "half_width": 0.05}]}
    cmp = compare.compare(results(aa), results(passthrough), noise_floor=floor)
    by = {r["kind"]: r for r in cmp["perf"]}
    assert by["throughput"]["delta"]["ratio"] == pytest.approx(1.517, abs=1e-3)
    assert by["latency"]["delta"]["ratio"] == pytest.approx(0.931, abs=1e-3)
    assert {r["verdict"] for r in cmp["perf"]} == {"too noisy"}  # 83% and 10.5% margins: no conclusion either
    assert by["latency"]["margin"] == pytest.approx(1.05 / 0.95 - 1) and cmp["verdict"] == "INCOMPLETE"
    assert "2 workloads too noisy to rule out a regression past 10%" in cmp["verdict_line"]
    # a point far beyond the compounded margin still counts: a plugin 40% slower at batch 1
    passthrough["perf"]["latency"]["b1"]["latency_s"] = perf_entry([1.0], [1.47])
    assert compare.compare(results(aa), results(passthrough), noise_floor=floor)["perf"][1]["verdict"] == "slower"


def _rounds_perf(base: list, cand: list) -> dict:
    """A throughput workload measured over interleaved rounds (one value a process, paired round by round)."""
    return {"throughput": {"w": {"tokens_per_s": dict(perf_entry(base, cand), paired=True)}}}


def test_no_change_that_cannot_rule_out_a_large_regression_is_too_noisy_not_a_pass():
    """Session 41's fk46-qwen3-next --smoke pair on an H200: the A/A's rounds reached 27-161% from 1, so a passthrough
    delta of 1.09 [0.85, 1.41] read "no change" and the comparison PASS, though a kernel 15% slower would read the
    same. Only a delta whose interval stays inside --max-margin may read "no change"."""
    aa, noisy, steady_aa, steady = row(), row(), row(), row()
    aa["perf"] = _rounds_perf([27330, 30100, 24800], [23080, 30970, 24500])
    noisy["perf"] = _rounds_perf([29420, 28300, 30600], [30360, 27900, 31400])
    cmp = compare.compare(results(aa), results(noisy), noise_floor=0.6)
    (r,) = cmp["perf"]
    assert r["verdict"] == "too noisy" and r["delta"]["lo"] < 0.9 and cmp["verdict"] == "INCOMPLETE"
    assert compare.compare(results(aa), results(noisy), noise_floor=0.6, max_margin=0.5)["verdict"] == "PASS"
    steady_aa["perf"] = _rounds_perf([27330, 27400, 27350], [27300, 27420, 27380])
    steady["perf"] = _rounds_perf([27310, 27390, 27360], [27350, 27300, 27400])
    tight = compare.compare(results(steady_aa), results(steady), noise_floor=0.02)
    assert tight["perf"][0]["verdict"] == "no change" and tight["verdict"] == "PASS"
    with pytest.raises(compare.CompareError, match="max margin"):
        compare.compare(results(aa), results(noisy), threshold=0.2, max_margin=0.1)


def test_a_too_noisy_delta_names_the_engine_process_farthest_from_its_other_rounds():
    """Session 37's vLLM fk46-mixtral passthrough: its first candidate process ran 16% below the other two."""
    aa, passthrough = row(), row()
    aa["perf"] = _rounds_perf([9547, 9546, 9558], [9540, 9513, 9428])
    passthrough["perf"] = _rounds_perf([9614, 9552, 9589], [8007, 9512, 9413])
    cmp = compare.compare(results(aa), results(passthrough), noise_floor=0.023)
    (r,) = cmp["perf"]
    assert r["verdict"] == "too noisy" and r["farthest"].startswith("HEAD candidate round 1: 0.846x")
    assert any("the farthest engine process, HEAD candidate round 1" in n for n in cmp["scenarios"][0]["notes"])
    assert compare.farthest_process({"candidate": {"values": [1, 2]}, "paired": True}, {}) == ""  # 2 rounds: none


def test_the_farthest_process_says_how_busy_the_host_was_during_it():
    """Session 43: a lane's slow runs fell while another lane on the same host compiled."""
    aa, passthrough = row(), row()
    aa["perf"] = _rounds_perf([9547, 9546, 9558], [9540, 9513, 9428])
    passthrough["perf"] = _rounds_perf([9614, 9552, 9589], [8007, 9512, 9413])

    def runs(*busy):
        return [{"timeline": [{"workload": "throughput w", "host_busy": b}]} for b in busy]

    passthrough["rounds"] = {"runs": [runs(0.05, 0.04, 0.06), runs(0.38, 0.05, 0.05)]}
    (r,) = compare.compare(results(aa), results(passthrough), noise_floor=0.023)["perf"]
    assert r["farthest"] == ("HEAD candidate round 1: 0.846x the median of its other rounds; the host's CPUs 38% busy "
                             "during it, 5% in the other runs of it")
    # session 57: the round's profiled pair measured the host's pace (time_split.host_pace)
    passthrough["time_split"] = {"timed": {"rounds": [{"round": 1, "host_pace": 1.31}, {"round": 3, "host_pace": 0.6}]}}
    (r,) = compare.compare(results(aa), results(passthrough), noise_floor=0.023)["perf"]
    assert r["farthest"].endswith("5% in the other runs of it; in that round the candidate's host took x1.31 the "
                                  "baseline's time for the same host work (the profiled runs)")


def test_runs_whose_engine_processes_were_bound_otherwise_are_warned_of():
    """FK_BIND_CPUS puts the engine processes on other host CPUs: a BASE, HEAD or A/A run made otherwise is named."""
    base, head, aa = results(row()), results(row()), results(row(), aa=True)
    base["cpu_binding"], head["cpu_binding"], aa["cpu_binding"] = "1", "gpu", "gpu"
    cmp = compare.compare(base, head, noise_floor=compare.noise_floor_from_aa(aa, "aa.json"))
    assert cmp["warnings"] == ["BASE ran with FK_BIND_CPUS=1, HEAD with FK_BIND_CPUS=gpu: their engine processes ran "
                               "on other host CPUs"]
    aa["cpu_binding"] = "0"
    cmp = compare.compare(base, head, noise_floor=compare.noise_floor_from_aa(aa, "aa.json"))
    assert cmp["warnings"][1].startswith("the A/A run ran with FK_BIND_CPUS=0, HEAD with FK_BIND_CPUS=gpu")
    del base["cpu_binding"]  # a run made before fk recorded it: nothing to tell
    assert compare.compare(base, results(row()))["warnings"] == []


def test_only_rows_that_timed_the_same_baseline_processes_count_as_sharing_them():
    def rounds(*logs):
        return {"rounds": {"runs": [[{"log": log} for log in logs], []]}}

    same = rounds("/o/logs/s/baseline/engine.log", "/o/logs/s/baseline-r2/engine.log")
    assert compare.shared_baselines(same, copy.deepcopy(same))
    other = rounds("/p/logs/s/baseline/engine.log", "/p/logs/s/baseline-r2/engine.log")
    assert not compare.shared_baselines(same, other)
    assert not compare.shared_baselines(rounds("/o/b.log"), rounds("/o/b.log"))  # one round: nothing to pair
    assert not compare.shared_baselines(row(), row())  # rows without rounds


def test_runs_warmed_up_otherwise_are_warned_of():
    base, head = results(row()), results(row())
    assert compare.compare(base, head)["warnings"] == []
    head["warmup_share"] = 0.25
    assert compare.compare(base, head)["warnings"] == ["warmup_share differs: BASE None, HEAD 0.25"]


def test_an_aa_of_one_process_a_side_gives_no_noise_floor():
    """Its spread is the repeats inside one process: a floor from it would judge a single pair (audit, s53)."""
    aa = results(row(), aa=True, interleave=1)
    with pytest.raises(compare.CompareError, match="one engine process per side"):
        compare.noise_floor_from_aa(aa, "aa.json")
    assert compare.noise_floor_from_aa(results(row(), aa=True), "aa.json")["value"] is not None


def test_a_head_that_ran_no_kernel_of_its_plugin_is_never_faster():
    """HEAD ran the stock model (every slot n/a), or only kernels that claim no speed (the passthrough): a faster
    delta is not the plugin's (audit, s53)."""
    head = results(row(tput=1.2, lat=0.8, status="NOT_APPLICABLE", slots={"rms_norm": ("n/a", 0)}))
    cmp = compare.compare(results(row()), head)
    assert cmp["summary"]["faster"] == 0 and all(p["verdict"] == "no change" for p in cmp["perf"])
    assert any("exercised no kernel of its plugin's own" in n for n in cmp["scenarios"][0]["notes"])
    assert compare.compare(results(row()), results(row(tput=1.2, lat=0.8)))["summary"]["faster"] == 2
    for mark in ("engine_own", "kernel_library", "unnamed"):  # exercised, yet no kernel of the plugin's own
        head = row(tput=1.2, lat=0.8)
        for ev in head["evidence"]["slots"].values():
            ev[mark] = True
        assert compare.compare(results(row()), results(head))["summary"]["faster"] == 0, mark


def test_a_single_pair_is_held_to_the_aas_farthest_round_not_its_mean_interval():
    """10 A/A rounds whose process pairs sit at 1.051 / 0.951: their interval over rounds is narrow, yet one pair of
    processes reads 5% off when nothing changed. A HEAD of one process a side at +6% (repeats inside the process
    only) must not be called faster against the narrow floor (audit, s53)."""
    def aa_row():
        r = row("s1")
        base = [100.0] * 10
        cand = [105.1 if i % 2 else 95.1 for i in range(10)]
        r["perf"] = {"throughput": {"balanced": {"tokens_per_s": perf_entry(base, cand)}}, "latency": {}}
        del r["evidence"]
        return r

    aa = results(aa_row(), aa=True, interleave=10)
    floor = compare.noise_floor_from_aa(aa, "aa.json")
    assert floor["value"] < 0.05 and floor["pair_reach"] == pytest.approx(0.051)
    head = row("s1")
    head["perf"] = {"throughput": {"balanced": {"tokens_per_s": perf_entry(BASE_TPUT, scaled(BASE_TPUT, 1.06),
                                                                           values=True)}}, "latency": {}}
    head["perf"]["throughput"]["balanced"]["tokens_per_s"]["paired"] = False  # one process a side: its repeats
    base = copy.deepcopy(head)
    base["perf"]["throughput"]["balanced"]["tokens_per_s"] = perf_entry(BASE_TPUT, BASE_TPUT, values=True)
    base["perf"]["throughput"]["balanced"]["tokens_per_s"]["paired"] = False
    cmp = compare.compare(results(base, interleave=1), results(head, interleave=1), noise_floor=floor)
    (p,) = cmp["perf"]
    assert p["margin"] == pytest.approx(0.051) and p["verdict"] != "faster", p
    assert any("farthest single round" in x for x in cmp["limitations"])


def test_a_side_that_read_zero_is_not_compared_never_faster():
    """A candidate latency of 0 s (or a ratio of 0 or inf) has no delta to judge (audit, s53)."""
    head = row()
    head["perf"]["latency"]["batch1"]["latency_s"] = perf_entry(BASE_LAT, [0.0] * len(BASE_LAT))
    cmp = compare.compare(results(row()), results(head), noise_floor=0.05)
    lat = next(p for p in cmp["perf"] if p["kind"] == "latency")
    assert lat["verdict"] == "not compared" and cmp["summary"]["faster"] == 0


def test_a_consistent_delta_inside_the_margin_is_named_not_counted():
    """s54's prefill passthrough: slower than the second stock process in all 5 rounds (0.976 [0.962, 0.991]), inside
    the A/A's 6.5%: "no change" stands, and the notes say which way HEAD moved."""
    def row(lo, hi, method="t over rounds", verdict=compare.D.NO_CHANGE, hib=True):
        return {"kind": "throughput", "workload": "prefill-1k", "verdict": verdict, "higher_is_better": hib,
                "margin": 0.065, "delta": {"ratio": 0.976, "lo": lo, "hi": hi, "n": 5, "method": method}}

    slower = row(0.962, 0.991)
    assert compare._inside_margin(slower) == [
        "throughput prefill-1k: HEAD slower by its own interval, 0.976 [0.962, 0.991], inside the ±6.5% margin: a "
        "delta smaller than the variation between engine processes, not counted"]
    assert slower["inside_margin"] == "slower" and slower["verdict"] == compare.D.NO_CHANGE
    assert compare._inside_margin(row(0.962, 0.991, hib=False))[0].startswith("throughput prefill-1k: HEAD faster")
    assert compare._inside_margin(row(0.98, 1.01)) == []  # the interval holds 1
    assert compare._inside_margin(row(0.962, 0.991, method="range")) == []  # a bound on repeats, not an interval
    assert compare._inside_margin(row(0.90, 0.92, verdict=compare.D.SLOWER)) == []  # counted already


def test_a_head_that_timed_fewer_workloads_than_base_is_incomplete_not_a_pass():
    """A regression in a workload HEAD left out (fk run --workloads) must not go unseen behind a PASS."""
    base, head = results(row()), results(row(lat=0.8))
    del head["scenarios"][0]["perf"]["throughput"]
    head["workloads"] = ["latency"]
    cmp = compare.compare(base, head)
    assert cmp["verdict"] == "INCOMPLETE"
    assert "s1: HEAD did not time throughput balanced, which BASE timed" in cmp["verdict_line"]
    assert "workloads differs: BASE None, HEAD ['latency']" in cmp["warnings"]
    assert [(p["workload"], p["verdict"]) for p in cmp["perf"]] == [("batch1", "faster")]
    assert any("HEAD timed only the workloads --workloads chose (latency)" in x for x in cmp["limitations"])
    base_less = copy.deepcopy(head)  # the other way round: HEAD's extra workload is a note, nothing is hidden
    cmp = compare.compare(base_less, results(row(lat=0.8)))
    assert cmp["verdict"] == "PASS"
    assert "workloads only in HEAD: throughput balanced" in cmp["scenarios"][0]["notes"]
