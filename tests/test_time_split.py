"""Where the device time went: families, shares of the delta, kernels on one side only."""
import pytest

from fk_adapters import time_split


def _profile(kernel_us):
    return [{"pid": 1, "kernels": {k: 1 for k in kernel_us}, "kernel_us": kernel_us}]


def test_a_slower_gemm_and_a_broken_fusion_are_named():
    base = _profile({"nvjet_tst_128x64": 800.0, "triton_poi_fused_rms_norm_mul_0": 100.0, "flash_fwd_kernel": 100.0})
    cand = _profile({"fk_triton_gemm_kernel": 950.0, "fk_triton_rms_norm_kernel": 60.0, "elementwise_kernel": 40.0,
                     "flash_fwd_kernel": 100.0})
    s = time_split.split(base, cand)
    assert (s["baseline_us"], s["candidate_us"]) == (1000.0, 1150.0) and abs(s["step_ratio"] - 1000 / 1150) < 1e-9
    fam = {r["family"]: r for r in s["families"]}
    assert (fam["gemm"]["delta_us"], fam["gemm"]["share_of_delta"], fam["gemm"]["slots"]) == (150.0, 1.0, ["gemm"])
    assert fam["attention"]["delta_us"] == 0.0 and s["families"][0]["family"] == "gemm"  # most of the delta first
    assert [k["kernel"] for k in s["only_candidate"]] == ["fk_triton_gemm_kernel", "fk_triton_rms_norm_kernel",
                                                          "elementwise_kernel"]
    assert [k["kernel"] for k in s["only_baseline"]] == ["nvjet_tst_128x64", "triton_poi_fused_rms_norm_mul_0"]
    text = "\n".join(time_split.markdown("fk46-llama-3.1", s))
    assert "| gemm" in text and "+100.0%" in text and "Only in the baseline" in text
    m = s["movers"]
    assert [k["kernel"] for k in m["kernels"]] == ["fk_triton_gemm_kernel", "nvjet_tst_128x64",
                                                   "triton_poi_fused_rms_norm_mul_0", "fk_triton_rms_norm_kernel",
                                                   "elementwise_kernel"]  # largest |delta| first; flash did not move
    assert (m["step_delta_us"], m["named_share"], m["idle_share"]) == (150.0, 1.0, None)
    assert "These 5 kernels name **100%** of the step's delta of +150 µs." in text


def test_the_named_kernels_share_counts_the_hosts_wait_and_a_still_step_is_not_attributed(monkeypatch):
    from fk_adapters import op_families

    base, cand = _profile({"a": 500.0, "b": 500.0}), _profile({"a": 560.0, "b": 500.0})
    base[0].update(op_families.span_busy([(0, 1000)]))
    cand[0].update(op_families.span_busy([(0, 1060), (1100, 1100)]))  # 40 µs more waiting on the host
    m = time_split.split(base, cand)["movers"]
    assert [k["kernel"] for k in m["kernels"]] == ["a"] and m["step_delta_us"] == 100.0
    assert abs(m["named_share"] - 0.6) < 1e-9 and abs(m["idle_share"] - 0.4) < 1e-9
    text = "\n".join(time_split.markdown("x", time_split.split(base, cand)))
    assert "**60%** of the step's delta of +100 µs; the device's wait on the host, +40 µs, is 40%" in text
    still = time_split.split(_profile({"a": 1000.0}), _profile({"a": 1005.0}))  # 0.5%: noise
    assert still["movers"]["named_share"] is None
    assert "nothing to attribute" in "\n".join(time_split.markdown("x", still))


def test_the_device_idle_between_kernels_is_told_apart_from_their_device_time():
    """Kernels of 10 µs each: the candidate's launch gaps grow, its device time does not."""
    from fk_adapters import op_families

    base = _profile({"k": 30.0})
    cand = _profile({"k": 30.0})
    base[0].update(op_families.span_busy([(0, 10), (10, 20), (5, 30)]))  # overlapping streams: busy once
    cand[0].update(op_families.span_busy([(0, 10), (40, 50), (90, 100)]))
    assert base[0] == dict(base[0], span_us=30.0, busy_us=30.0) and cand[0]["busy_us"] == 30.0
    s = time_split.split(base, cand)
    assert (s["baseline_idle_us"], s["candidate_idle_us"], s["step_ratio"]) == (0.0, 70.0, 1.0)
    assert "waited on the host" in "\n".join(time_split.markdown("x", s))
    assert time_split.split(_profile({"k": 1.0}), cand)["baseline_idle_us"] is None  # an older profile: no claim
    assert op_families.span_busy([]) == {}


def test_no_split_without_a_profile_on_both_sides():
    assert time_split.split(None, _profile({"k": 1.0})) is None
    assert time_split.split(_profile({"k": 1.0}), []) is None


def test_compare_shows_where_heads_candidate_moved_the_time():
    from fk_adapters import compare, compare_report
    from tests.test_compare import results, row

    stock = {"nvjet_tst_128x64": 800.0, "flash_fwd_kernel": 100.0}
    base_row, head_row = row(), row()
    base_row["time_split"] = time_split.split(_profile(stock), _profile({"fk_triton_gemm_kernel": 950.0,
                                                                          "flash_fwd_kernel": 100.0}))
    head_row["time_split"] = time_split.split(_profile(stock), _profile({"fk_triton_gemm_kernel": 820.0,
                                                                          "flash_fwd_kernel": 100.0}))
    (moved_gemm, *_) = time_split.moved(base_row["time_split"], head_row["time_split"])
    assert (moved_gemm["family"], moved_gemm["base_us"], moved_gemm["head_us"], moved_gemm["delta_us"]) == (
        "gemm", 950.0, 820.0, -130.0)
    text = compare_report.to_markdown(compare.compare(results(base_row), results(head_row), threshold=0.02))
    assert "Where the device time moved" in text and "| gemm" in text and "950 (800)" in text and "-130" in text
    assert "one run of **latency" not in text  # no profiled workload on either side: no such line
    assert "per slot, device µs" not in text  # splits without per-slot rows (an older fk's): no slot table
    ev = {"slots": {"gemm": {"status": "exercised", "kernel_names": ["fk_triton_gemm_kernel"]}}}
    for r in (base_row, head_row):
        r["time_split"]["slots"] = time_split.per_slot(r["time_split"], ev, _profile(
            {"fk_triton_gemm_kernel": r["time_split"]["candidate_us"] - 100.0}))
    assert time_split.moved_slots(base_row["time_split"], head_row["time_split"]) == [
        {"slot": "gemm", "base_us": 950.0, "head_us": 820.0, "delta_us": -130.0}]
    text = compare_report.to_markdown(compare.compare(results(base_row), results(head_row), threshold=0.02))
    assert "per slot, device µs in each profiled step" in text and "| s1         | gemm   |       950 |" in text
    head_row["time_split"]["timed"] = {"workload": "latency batch32", "timed_speedup": 0.9, "profiled_speedup": 0.88,
                                       "timed_delta_us": 1000.0, "kernels_delta_us": 900.0, "named_share": 0.9,
                                       "accounts": True}
    text = compare_report.to_markdown(compare.compare(results(base_row), results(head_row), threshold=0.02))
    assert "HEAD: The profiled run is one run of **latency batch32**" in text and "**90%** of the timed delta" in text


def test_the_wait_before_each_launch_is_named_for_the_kernel_the_device_waited_for():
    from fk_adapters import op_families

    # two streams: "b" overlaps "a", so no wait; the gaps end at "c" (10 µs) and "a" again (5 µs)
    timeline = [(0, 10, "a"), (5, 12, "b"), (22, 30, "c"), (35, 40, "a")]
    got = op_families.span_busy(timeline)
    assert got == {"span_us": 40.0, "busy_us": 25.0, "wait_us": {"c": 10.0, "a": 5.0}}
    assert sum(got["wait_us"].values()) == got["span_us"] - got["busy_us"]
    assert "wait_us" not in op_families.span_busy([(0, 10), (20, 30)])  # unnamed intervals: the old keys only


def _timed(kernel_us, timeline):
    from fk_adapters import op_families

    prof = _profile(kernel_us)
    prof[0].update(op_families.span_busy(timeline))
    return prof


def test_a_kernel_whose_launches_the_device_waits_for_is_named_with_that_wait():
    """Same device time for the swapped gemm, but the device waits 300 µs more for the candidate's launches: the
    step's delta is that wait, and it is named for the gemm kernel (device-only attribution names 0% of it)."""
    base = _timed({"copy": 10.0, "nvjet_gemm": 800.0, "flash_fwd_kernel": 200.0},
                  [(0, 10, "copy"), (10, 810, "nvjet_gemm"), (860, 1060, "flash_fwd_kernel")])
    cand = _timed({"copy": 10.0, "fk_triton_gemm_kernel": 800.0, "flash_fwd_kernel": 200.0},
                  [(0, 10, "copy"), (310, 1110, "fk_triton_gemm_kernel"), (1160, 1360, "flash_fwd_kernel")])
    s = time_split.split(base, cand)
    m = s["movers"]
    assert m["step_delta_us"] == 300.0 and m["idle_delta_us"] == 300.0
    gemm = next(k for k in m["kernels"] if k["kernel"] == "fk_triton_gemm_kernel")
    assert (gemm["delta_us"], gemm["wait_delta_us"]) == (800.0, 300.0)
    assert abs(m["named_share"] - 1.0) < 1e-9 and m["named_wait_us"] == 300.0
    text = "\n".join(time_split.markdown("x", s))
    assert "device +800, wait before its launches +300" in text
    assert "(+300 µs of it before these kernels' launches)" in text
    old = time_split.split(_profile(base[0]["kernel_us"]), cand)  # a side without the measure: device time only
    assert "wait_delta_us" not in old["movers"]["kernels"][0] and old["movers"]["named_wait_us"] is None


def test_the_report_sets_the_profiled_steps_speedup_beside_the_timed_ones():
    from fk_adapters import op_families, report

    base, cand = _profile({"k": 30.0}), _profile({"k": 30.0})
    base[0].update(op_families.span_busy([(0, 10), (10, 20), (20, 30)]))
    cand[0].update(op_families.span_busy([(0, 10), (40, 50), (90, 100)]))  # 100 µs against 30: speedup 0.3
    perf = {"throughput": {"balanced": {"tokens_per_s": {"ratio": 0.95}}},
            "latency": {"batch1": {"latency_s": {"ratio": 1.25}}}}  # speedups 0.95 and 0.8
    row = {"scenario": "x", "time_split": time_split.split(base, cand), "perf": perf}
    text = "\n".join(report._time_split_lines([row]))
    assert "speedup (stock / candidate time, its kernels' and the waits between them) is 0.300" in text
    assert "span 0.800-0.950: the step lies outside them, so its attribution does not explain" in text
    perf["latency"]["batch1"]["latency_s"]["ratio"] = 1 / 0.3
    assert "span 0.300-0.950: the step lies inside them." in "\n".join(report._time_split_lines([row]))
    old = dict(row, time_split=time_split.split(_profile({"k": 30.0}), _profile({"k": 30.0})))  # no waits measured
    assert "speedup" not in "\n".join(report._time_split_lines([old]))


def test_a_named_share_over_100_percent_says_why():
    """Session 48: the listed movers named 207% of the step's delta, the displaced GEMM kernels outside the list."""
    base = _profile({f"nvjet_{i}": 100.0 for i in range(10)})
    cand = _profile({"fk_triton_gemm_kernel": 1100.0})
    s = time_split.split(base, cand)
    assert s["movers"]["named_share"] > 1
    assert "the kernels not listed moved the other way" in "\n".join(time_split.markdown("x", s))
    assert "not listed" not in "\n".join(time_split.markdown("x", time_split.split(base, _profile(
        {**base[0]["kernel_us"], "nvjet_0": 300.0}))))


def test_each_slot_that_ran_gets_its_plugin_kernels_device_time_beside_its_family():
    base = _profile({"nvjet_tst_128x64": 800.0, "vllm::rms_norm_kernel": 40.0, "vllm::fused_add_rms_norm_kernel": 60.0,
                     "flash_fwd_kernel": 100.0})
    cand = _profile({"fk_triton_gemm_kernel": 950.0, "fk_triton_rms_norm_kernel": 30.0,
                     "vllm::fused_add_rms_norm_kernel": 60.0, "flash_fwd_kernel": 100.0})
    s = time_split.split(base, cand)
    evidence = {"slots": {
        "gemm": {"status": "exercised", "kernel_names": ["fk_triton_gemm_kernel"]},
        "rms_norm": {"status": "exercised", "kernel_names": ["fk_triton_rms_norm_kernel"]},
        "fused_add_rms_norm": {"status": "exercised", "kernel_names": ["fk_triton_fused_add_rms_norm_kernel"]},
        "silu_and_mul": {"status": "not exercised", "kernel_names": ["fk_triton_silu_and_mul_kernel"]},
        "rotary_embedding": {"status": "exercised", "kernel_names": []}}}  # no names declared: proven by calls
    rows = {r["slot"]: r for r in time_split.per_slot(s, evidence, cand)}
    assert sorted(rows) == ["fused_add_rms_norm", "gemm", "rms_norm"]
    assert rows["gemm"] == {"slot": "gemm", "family": "gemm", "kernels_us": 950.0, "family_baseline_us": 800.0,
                            "family_candidate_us": 950.0, "family_alone": True}
    assert rows["rms_norm"]["kernels_us"] == 30.0 and rows["rms_norm"]["family_baseline_us"] == 100.0
    assert rows["fused_add_rms_norm"]["kernels_us"] == 0.0  # declared, exercised, yet none of its kernels profiled
    assert not rows["rms_norm"]["family_alone"] and not rows["fused_add_rms_norm"]["family_alone"]
    s["slots"] = list(rows.values())
    text = "\n".join(time_split.markdown("x", s))
    slot_table = text.split("Per slot")[1].splitlines()
    table = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
             for line in slot_table if line.startswith("| ") and "plugin kernels" not in line}
    assert table["gemm"] == ["950", "gemm", "800", "950", "yes"]
    assert table["rms_norm"][-1] == "no: the family's rows hold both"


def test_the_host_ranges_whose_self_time_moved_most_are_named_with_their_calls():
    base = [{**_profile({"nvjet": 100.0})[0], "host_us": {"cudaGraphLaunch": 100.0, "aten::copy_": 50.0},
             "host_calls": {"cudaGraphLaunch": 10, "aten::copy_": 20}, "host_cut": False}]
    cand = [{**_profile({"nvjet": 100.0})[0],
             "host_us": {"cudaGraphLaunch": 400.0, "fk_passthrough::gemm": 300.0, "aten::copy_": 50.0},
             "host_calls": {"cudaGraphLaunch": 40, "fk_passthrough::gemm": 10, "aten::copy_": 20}, "host_cut": False}]
    rows = time_split.split(base, cand)["host"]
    assert [(r["name"], r["baseline_calls"], r["candidate_calls"], r["delta_us"]) for r in rows] == [
        ("cudaGraphLaunch", 10, 40, 300.0), ("fk_passthrough::gemm", 0, 10, 300.0)]  # copy_ did not move
    text = "\n".join(time_split.markdown("fk46-qwen3-next", time_split.split(base, cand)))
    assert "`cudaGraphLaunch` (calls 10 → 40, self 100 → 400 µs, +300)" in text
    base[0]["host_cut"] = True  # the baseline left names out: one it lacks may have been below its cut
    assert [r["name"] for r in time_split.host_movers(base, cand)] == ["cudaGraphLaunch"]
    assert time_split.host_movers(_profile({"nvjet": 1.0}), cand) == []  # an older profile: nothing to compare
    assert "host" not in time_split.split(_profile({"nvjet": 1.0}), cand)


def _host(us: dict, calls: dict) -> list[dict]:
    return [{**_profile({"nvjet": 100.0})[0], "host_us": us, "host_calls": calls, "host_cut": False}]


def test_the_host_pace_is_the_median_ratio_over_ranges_both_sides_ran_as_often():
    """Session 57: one process's host ran every range 1.3x as long as the other's; the pace reads that, and not a
    range one side called more (fk's own op, a graph launched more often) or too short to time."""
    names = [f"schedule: phase{i}" for i in range(6)]
    base = _host({n: 10_000.0 for n in names} | {"tiny": 10.0, "cudaGraphLaunch": 5_000.0},
                 {n: 100 for n in names} | {"tiny": 100, "cudaGraphLaunch": 10})
    slow = [1.3, 1.3, 1.3, 1.2, 1.4, 1.3]
    cand = _host({n: 10_000.0 * f for n, f in zip(names, slow)} | {"tiny": 50.0, "cudaGraphLaunch": 50_000.0,
                                                                    "fk_passthrough::gemm": 9_000.0},
                 {n: 100 for n in names} | {"tiny": 100, "cudaGraphLaunch": 40, "fk_passthrough::gemm": 10})
    pace = time_split.host_pace(base, cand)
    assert pace["ratio"] == pytest.approx(1.3) and pace["ranges"] == 6  # tiny, the graph launches, fk's op: out
    assert pace["quartiles"][0] <= 1.3 <= pace["quartiles"][1]
    text = "\n".join(time_split.markdown("x", time_split.split(base, cand)))
    assert "The candidate's host took x1.30 the baseline's time for the same host work" in text
    assert time_split.host_pace(base, _host({n: 1.0 for n in names[:4]}, {n: 100 for n in names[:4]})) is None
    assert time_split.host_pace(_profile({"nvjet": 1.0}), cand) is None  # an older profile
    assert "host_pace" not in time_split.split(_profile({"nvjet": 1.0}), cand)


def test_kernels_that_stocks_own_processes_vary_in_are_not_pinned_on_the_plugin():
    """Session 62's fk46-mamba2: each engine process's prefill gemms ran their own cuBLAS tiles, stock's too."""
    r1 = _profile({"nvjet_tst_192x208": 60.0, "nvjet_tst_192x32": 400.0, "_chunk_scan_fwd_kernel": 14.0})
    r2 = _profile({"nvjet_tst_192x192": 45.0, "nvjet_tst_192x32": 400.0, "_chunk_scan_fwd_kernel": 14.0})
    assert time_split.own_variation([r1, r2, None]) == ["gemm"]
    assert time_split.own_variation([r1, r1]) == [] and time_split.own_variation([r1]) == []
    cand = _profile({"nvjet_tst_128x232": 60.0, "nvjet_tst_192x32": 400.0, "_chunk_scan_fwd_kernel": 14.0})
    s = time_split.split(r1, cand)
    quiet = "\n".join(time_split.markdown("m", s))
    assert "Only in the candidate" in quiet and "Stock's own profiled processes" not in quiet
    s["stock_varies"] = time_split.own_variation([r1, r2])
    assert "did not all launch the same gemm kernels either" in "\n".join(time_split.markdown("m", s))
    s["stock_varies"] = ["ssm / linear attention"]  # a family with no kernel on one side only: nothing said
    assert "Stock's own profiled processes" not in "\n".join(time_split.markdown("m", s))
