import json

from fk_adapters import coverage, op_families


def _capture(path, scenario, engine, created, calls, shares=None):
    wl = {"scenario": scenario, "engine": engine, "device": "cuda", "created": created,
          "total_calls": calls, "slots": {}}
    if shares:
        wl["profile"] = {"op_shares": shares}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(wl))


def test_matrix_takes_the_newest_capture_and_ranks_families_outside_the_catalog(tmp_path):
    _capture(tmp_path / "a" / "x.json", "m", "vllm", "2026-01-01", {"rms_norm": 1})
    _capture(tmp_path / "b" / "x.json", "m", "vllm", "2026-02-01", {"rms_norm": 5, "silu_and_mul": 0},
             {"gemm": 0.6, "rms_norm": 0.1, "moe": 0.3})
    _capture(tmp_path / "c" / "y.json", "n", "sglang", "2026-02-01", {"rms_norm": 2},
             {"gemm": 0.5, "layer_norm": 0.2, "attention": 0.3})
    caps = coverage.collect([str(tmp_path)])
    assert [(c["scenario"], c["total_calls"]["rms_norm"]) for c in caps] == [("m", 5), ("n", 2)]
    ranking = coverage.uncovered_ranking(caps)
    assert ranking[0][0] == "gemm" + coverage.NOT_ROUTED and ranking[0][1] == 0.55  # a catalog family, not called
    assert "rms_norm" not in [f for f, _, _ in ranking]  # a catalog family is covered, not ranked
    _capture(tmp_path / "d" / "z.json", "o", "vllm", "2026-02-01", {"rms_norm": 3, "silu_and_mul": 0},
             {"moe": 0.9, "activation": 0.06, "rms_norm": 0.04})
    by_family = {f: m for f, m, _ in coverage.uncovered_ranking(coverage.collect([str(tmp_path)]))}
    assert "activation" + coverage.NOT_ROUTED in by_family  # its slot was never called: not covered
    text, data = coverage.render(caps)
    assert "| m " in text and "10.0%" in text and "Where the catalog should grow" in text
    assert data["uncovered_ranking"][0]["family"] == "gemm" + coverage.NOT_ROUTED


def test_shares_are_sorted_again_from_kernel_times_where_the_capture_kept_them():
    stale = {"activation": 0.5, "gemm": 0.5}  # as sorted before matmul_ogs was known to be MoE
    kept = {"profile": {"op_shares": stale, "kernel_us": {"_p_matmul_ogs_NNN_bf16_swiglu": 50.0, "nvjet_tst": 50.0}}}
    assert coverage.op_shares(kept) == {"moe": 0.5, "gemm": 0.5}
    assert coverage.op_shares({"profile": {"op_shares": stale}}) == stale
    assert coverage.op_shares({}) == {}


def _run(path, created, plugin_slots, families, aa=False, mode="compiled", engine="vllm"):
    split = [{"family": f, "baseline_us": us} for f, us in families.items()]
    row = {"scenario": "m", "time_split": {"baseline_us": sum(families.values()), "families": split},
           "evidence": {"slots": {s: {"status": st} for s, st in plugin_slots.items()}}}
    res = {"kind": "run", "engine": engine, "device": "cuda", "mode": mode, "created": created, "aa": aa,
           "scenarios": [row]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res))


def test_as_served_shares_come_from_the_stock_step_and_the_slots_any_plugin_proved(tmp_path):
    fams = {"gemm": 60.0, "moe": 30.0, "attention": 6.0, "copy / elementwise": 4.0}
    _run(tmp_path / "a" / "results.json", "2026-01-01",
         {"gemm": "exercised", "fused_moe": "exercised", "silu_and_mul": "n/a"}, fams)
    _run(tmp_path / "b" / "results.json", "2026-02-01", {"gemm": "exercised", "fused_moe": "not exercised"},
         dict(fams, gemm=50.0))
    _run(tmp_path / "c" / "results.json", "2026-03-01", {"gemm": "exercised"}, fams, aa=True)  # an A/A: left out
    _run(tmp_path / "d" / "results.json", "2026-03-02", {"gemm": "exercised"}, fams, mode="eager")  # not as served
    runs = coverage.collect_served([str(tmp_path)])
    assert len(runs) == 1 and runs[0]["step_us"] == 90.0  # the newest run's step
    assert runs[0]["exercised"] == ["fused_moe", "gemm"]  # proven in some run of the scenario
    assert coverage.served_share(runs[0]) == (50.0 + 30.0) / 90.0
    text, data = coverage.render([], served=runs)
    assert "## As served" in text and "88.9%" in text and "attention 6.7%" in text
    assert data["served"][0]["share"] == (50.0 + 30.0) / 90.0


def test_an_engine_that_never_compiles_is_served_eager_whatever_mode_fk_was_asked_for(tmp_path):
    fams = {"gemm": 10.0, "copy / elementwise": 90.0}
    _run(tmp_path / "a" / "results.json", "2026-01-01", {"gemm": "exercised"}, fams, engine="transformers")
    _run(tmp_path / "b" / "results.json", "2026-01-02", {"gemm": "exercised"}, fams, mode="eager",
         engine="transformers")
    [run] = coverage.collect_served([str(tmp_path)])  # both are the same eager serving: one row, the newest
    assert run["mode"] == coverage.EAGER_ONLY and run["created"] == "2026-01-02"
    text, _ = coverage.render([], served=[run])
    assert "| eager (its only mode) " in text and "| compiled " not in text


def test_a_profile_holding_fks_own_statistics_gives_no_device_time_shares(tmp_path):
    """Before session 30 only token models paused fk's value statistics while profiling: another family's profile
    without the flag is not the model's device time (its calls still count); one that says it paused them is."""
    shares = {"conv": 0.1, "reduce": 0.5, "copy / elementwise": 0.4}
    for name, scenario, engine, calls, profile in [("a", "fk46-mobilenetv4", "transformers", {"conv2d": 462}, shares),
                                                   ("b", "fk46-llama-3.1", "vllm", {"gemm": 9}, {"gemm": 0.9}),
                                                   ("c", "fk46-swinv2", "transformers", {"conv2d": 1}, {"conv": 1.0})]:
        _capture(tmp_path / name / "x.json", scenario, engine, "2026-11-26", calls, profile)
        if name != "c":  # c: older than the statistics
            wl = json.loads((tmp_path / name / "x.json").read_text())
            (tmp_path / name / "x.json").write_text(json.dumps(dict(wl, values_note="...")))
    old, llm, before = sorted(coverage.collect([str(tmp_path)]), key=lambda c: c["path"])
    assert coverage.op_shares(old) == {} and coverage.op_shares(llm) == {"gemm": 0.9}
    assert coverage.op_shares(before) == {"conv": 1.0}
    assert coverage.op_shares(dict(old, scenario="someone-elses")) == {}  # its family unknown
    md, _ = coverage.render([old, llm])
    [row] = [line for line in md.splitlines() if line.startswith("| fk46-mobilenetv4 ")]
    assert row.rstrip(" |").endswith("-")  # no device time in catalog slots claimed
    old["profile"]["values_paused"] = True
    assert coverage.op_shares(old) == shares


def test_device_time_inside_slot_calls_is_its_own_column_where_the_capture_measured_it(tmp_path):
    profile = {"kernel_us": {"nvjet_tst": 60.0, "elementwise_kernel": 30.0, "mean_reduce": 10.0},
               "slot_us": {"gemm": 60.0, "gated_rms_norm": 30.0}, "values_paused": True,
               "slot_us_from": op_families.SLOT_US_FROM}
    measured = {"scenario": "m", "engine": "vllm", "device": "cuda", "created": "x", "path": "p",
                "total_calls": {"gemm": 3, "gated_rms_norm": 2}, "profile": profile, "values_note": "n"}
    older = dict(measured, scenario="n", profile={k: v for k, v in profile.items() if k != "slot_us"})
    assert coverage.in_slot_share(measured) == 0.9 and coverage.in_slot_share(older) is None
    host_summed = dict(measured, profile={k: v for k, v in profile.items() if k != "slot_us_from"})
    assert coverage.in_slot_share(host_summed) is None  # session 35's measure: it read 101.2% on fk46-mixtral
    text, data = coverage.render([measured, older])
    assert "| 60.0% " in text and "| 90.0% " in text and "inside slot calls" in text  # by name: only the gemm
    assert [c["in_slot_share"] for c in data["captures"]] == [0.9, None]
