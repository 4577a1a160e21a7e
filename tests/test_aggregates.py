"""FastKernels-style aggregates: hand-built results rows, checked against hand-worked numbers."""
import math

import pytest

from fk_adapters import aggregates as agg


def _row(name, tp=None, lat=None, status="PASSED", passed=True, slots=None, items=False):
    """One results row: tp {workload: throughput ratio}, lat {workload: latency ratio (cand/base seconds)}."""
    key = "items_per_s" if items else "tokens_per_s"
    row = {"scenario": name, "status": status, "failures": []}
    if status in ("RUNTIME_ERROR", "TIMEOUT"):
        return row
    row["perf"] = {"throughput": {w: {key: {"ratio": r}} for w, r in (tp or {}).items()},
                   "latency": {w: {"latency_s": {"ratio": r}} for w, r in (lat or {}).items()}}
    row["correctness"] = {"passed": passed, "failures": [] if passed else ["bad"]}
    row["evidence"] = {"slots": {s: {"status": st, "calls": 5 if st == "exercised" else 0}
                                 for s, st in (slots or {"rms_norm": "exercised"}).items()}}
    return row


def test_latency_ratio_is_inverted_into_a_speedup():
    s = agg.per_scenario(_row("a", tp={"balanced": 1.0}, lat={"batch1": 0.5}))
    assert s["latency"] == {"batch1": pytest.approx(2.0)}  # candidate takes half the time: 2x faster
    assert s["throughput"] == {"balanced": 1.0}


def test_per_scenario_geomeans_and_blend():
    s = agg.per_scenario(_row("a", tp={"p": 2.0, "d": 0.5, "b": 1.0}, lat={"b1": 0.25, "b32": 1.0}))
    assert s["throughput_geomean"] == pytest.approx(1.0)
    assert s["latency_geomean"] == pytest.approx(2.0)  # geomean(4, 1)
    assert s["speedup"] == pytest.approx(math.sqrt(2.0))  # 1^0.5 * 2^0.5
    assert s["outcome"] == "correct" and s["covered"] is True and s["scored"]


def test_blend_with_one_side_only():
    assert agg.blend(1.21, None) == pytest.approx(1.21)
    assert agg.blend(None, 0.81) == pytest.approx(0.81)
    assert agg.blend(None, None) is None
    assert agg.blend(4.0, 1.0) == pytest.approx(2.0)
    assert agg.blend(4.0, 1.0, w=1.0) == pytest.approx(4.0)


def test_first_throughput_key_is_used_and_items_per_s_works():
    row = _row("a", tp={"batch1": 1.5}, items=True)
    assert agg.per_scenario(row)["throughput_geomean"] == pytest.approx(1.5)
    row["perf"]["throughput"]["batch1"]["output_tokens_per_s"] = {"ratio": 9.0}
    row["perf"]["throughput"]["batch1"]["tokens_per_s"] = {"ratio": 3.0}
    assert agg.per_scenario(row)["throughput"] == {"batch1": 3.0}  # tokens_per_s first, nothing double-counted


def test_outcomes_and_coverage():
    assert agg.per_scenario(_row("a", status="INCORRECT", passed=False))["outcome"] == "incorrect"
    assert agg.per_scenario(_row("a", status="INCORRECT", passed=True))["outcome"] == "incorrect"
    assert agg.per_scenario(_row("a", status="RUNTIME_ERROR"))["outcome"] == "failed"
    assert agg.per_scenario(_row("a", tp={"b": 1.1}, status="LOAD_ERROR"))["outcome"] == "failed"
    stock = agg.per_scenario(_row("a", tp={"b": 1.1}, slots={"rms_norm": "n/a"}))
    assert stock["outcome"] == "correct" and stock["covered"] is False and not stock["scored"]
    part = agg.per_scenario(_row("a", tp={"b": 1.1}, status="NOT_EXERCISED",
                                 slots={"rms_norm": "exercised", "silu_and_mul": "not exercised", "x": "n/a"}))
    # a kernel that did not run in every layer (or round) it should have: no speedup to claim
    assert (part["exercised"], part["applicable"], part["covered"], part["scored"]) == (1, 2, True, False)
    assert part["unscored"] == "not exercised"


def test_summarize_categories_overall_and_failures():
    results = {"candidate": "triton", "aa": False, "interleave": 3, "scenarios": [
        _row("l1", tp={"b": 4.0}, lat={"b1": 1.0}),                # blend 2
        _row("l2", tp={"b": 1.0}, lat={"b1": 2.0}),                # latency speedup 0.5: blend 0.5^0.5
        _row("v1", tp={"b": 1.0}, lat={"b1": 1.0 / 3.0}),          # blend 3^0.5
        _row("v2", tp={"b": 100.0}, status="INCORRECT", passed=False),  # excluded from speed
        _row("v3", status="TIMEOUT"),                             # excluded, no correctness
        _row("v4", tp={"b": 50.0}, slots={"rms_norm": "n/a"}),      # correct but ran stock: excluded
    ]}
    cats = {"l1": "LLM", "l2": "LLM", "v1": "Vision", "v2": "Vision", "v3": "Vision", "v4": "Vision"}
    s = agg.summarize(results, categories=cats)
    llm, vis = s["categories"]["LLM"], s["categories"]["Vision"]
    # l1: 4^0.5 * 1^0.5 = 2; l2: 1 * 0.5^0.5; geomean = (2 * 0.5^0.5)^0.5 = 2^0.25
    assert llm["speedup"] == pytest.approx(2 ** 0.25)
    assert vis["speedup"] == pytest.approx(3 ** 0.5) and vis["scored"] == 1 and vis["scenarios"] == 4
    assert (vis["correct"], vis["covered"]) == (2, 2)
    assert s["overall"]["speedup"] == pytest.approx((2 ** 0.25 * 3 ** 0.5) ** 0.5)  # categories weigh equally
    assert s["counts"] == {"correct": 4, "incorrect": 1, "failed": 1, "scenarios": 6, "scored": 3}
    assert s["overall"]["correctness"] == pytest.approx(4 / 6)
    assert s["overall"]["coverage"] == pytest.approx(4 / 6)  # l1 l2 v1 v2 exercised a slot; v3 failed, v4 stock
    assert s["overall"]["score"] == pytest.approx(s["overall"]["speedup"] * (4 / 6) * (4 / 6))
    assert s["statuses"] == {"PASSED": 4, "INCORRECT": 1, "TIMEOUT": 1}
    single = agg.summarize(dict(results, interleave=1), categories=cats)  # one process a side: no score
    assert single["overall"]["speedup"] == s["overall"]["speedup"] and single["overall"]["score"] is None
    md = agg.markdown(single)
    assert "- score (overall x correctness x coverage): **not given** (not significant: next line)" in md
    assert "- **not significant**: one engine process per side" in md


def test_category_lookup_from_catalog_and_fallback():
    assert agg.category_of("fk46-dinov3") == "Multimodal & encoders"
    assert agg.category_of("llama31-8b-4l") == agg.UNCATEGORIZED
    assert agg.category_of("no-such-scenario") == agg.UNCATEGORIZED
    s = agg.summarize({"scenarios": [_row("fk46-dinov3", tp={"b": 1.0}), _row("fk46-mamba", tp={"b": 1.0})]})
    assert set(s["categories"]) == {"Multimodal & encoders", "Linear attn & new"}


def test_aa_run_leaves_coverage_out():
    row = _row("a", tp={"b": 0.9})
    del row["evidence"]
    s = agg.summarize({"aa": True, "interleave": 3, "scenarios": [row]}, categories={"a": "X"})
    assert s["scenarios"][0]["covered"] is None and s["scenarios"][0]["scored"]
    assert s["overall"]["coverage"] is None and s["overall"]["score"] == pytest.approx(0.9)


def test_nothing_scored_gives_no_score():
    s = agg.summarize({"interleave": 3, "scenarios": [_row("a", tp={"b": 2.0}, status="INCORRECT", passed=False)]},
                      categories={"a": "X"})
    assert s["categories"]["X"]["speedup"] is None
    assert s["overall"]["speedup"] is None and s["overall"]["score"] is None
    assert "- score (overall x correctness x coverage): -" in agg.markdown(s)


def test_markdown_tables():
    s = agg.summarize({"candidate": "t", "scenarios": [_row("a", tp={"b": 4.0}, lat={"b1": 1.0})]},
                      categories={"a": "Dense & MoE LLM"})
    md = agg.markdown(s)
    assert "| a " in md and "Dense & MoE LLM" in md and "2.000" in md and "1/1" in md
    assert "- correctness: 100% (1 correct, 0 incorrect, 0 failed of 1)" in md


def test_a_scenario_whose_timings_were_disturbed_is_not_scored():
    clean, shared = _row("a", tp={"w": 1.1}), _row("b", tp={"w": 0.5})
    shared["perf"]["disturbed"] = ["round 1 baseline: another process used the GPU during this run (pid 7)"]
    rows = {r["scenario"]: agg.per_scenario(r) for r in (clean, shared)}
    assert rows["a"]["scored"] and not rows["b"]["scored"] and rows["b"]["disturbed"]


def _rounds(base, cand):
    """A ratio with its per-round values (one engine process per side and round)."""
    return {"ratio": math.prod(c / b for b, c in zip(base, cand)) ** (1 / len(base)),
            "baseline": {"values": base}, "candidate": {"values": cand}}


def test_a_score_within_the_variation_between_processes_says_so():
    steady = {"scenario": "a", "status": "PASSED", "correctness": {"passed": True, "failures": []},
              "evidence": {"slots": {"gemm": {"status": "exercised", "calls": 5}}},
              "perf": {"throughput": {"w": {"tokens_per_s": _rounds([100, 103, 98], [102, 100, 101])}},
                       "latency": {"b1": {"latency_s": _rounds([1.0, 1.02, 0.99], [1.01, 1.0, 1.0])}}}}
    s = agg.summarize({"interleave": 3, "scenarios": [steady]}, categories={"a": "X"})
    assert s["significance"] == {"faster": 0, "slower": 0, "workloads": 2}
    assert s["overall"]["score"] > 1  # a point estimate above 1 ...
    assert "**no significant change**: no scored workload's 95% interval" in agg.markdown(s)  # ... that claims nothing
    moved = dict(steady, perf={"throughput": {"w": {"tokens_per_s": _rounds([100, 101, 100], [120, 121, 119])}},
                               "latency": {"b1": {"latency_s": _rounds([1.0, 1.01, 1.0], [1.3, 1.31, 1.3])}}})
    s = agg.summarize({"interleave": 3, "scenarios": [moved]}, categories={"a": "X"})
    assert s["significance"] == {"faster": 1, "slower": 1, "workloads": 2}
    assert "1 workload(s) faster, 1 slower, of 2 scored" in agg.markdown(s)
    single = agg.summarize({"interleave": 1, "scenarios": [steady]}, categories={"a": "X"})
    assert single["significance"] is None and "no significant change" not in agg.markdown(single)


def test_rows_that_ran_no_kernel_of_the_plugins_own_have_no_speedup_to_claim():
    """A plugin that does nothing must never read as a speedup (audit, session 53)."""
    own = _row("a", tp={"w": 1.05})
    own["evidence"]["slots"]["rms_norm"]["engine_own"] = True  # passthrough: the engine's own kernel handed back
    legacy = _row("g", tp={"w": 1.05})
    legacy["evidence"]["slots"]["rms_norm"]["kernel"] = "engine:rms_norm"  # a passthrough row written before the mark
    assert agg.per_scenario(legacy)["unscored"] == "the engine's own kernels"
    mixed = _row("b", tp={"w": 1.05}, slots={"rms_norm": "exercised", "silu_and_mul": "exercised"})
    mixed["evidence"]["slots"]["rms_norm"]["engine_own"] = True
    bare = _row("c", tp={"w": 1.05})
    del bare["evidence"]  # a candidate row without kernel evidence (only an A/A run has none)
    zero = _row("d", tp={"w": 1.05, "x": 0.0})  # a workload that served nothing
    na = _row("e", tp={"w": 1.05}, status="NOT_APPLICABLE", slots={"rms_norm": "n/a"})
    rows = {r["scenario"]: agg.per_scenario(r) for r in (own, mixed, bare, zero, na)}
    assert rows["a"]["unscored"] == "the engine's own kernels" and rows["b"]["scored"]
    assert rows["c"]["unscored"] == "no kernel evidence" and agg.per_scenario(bare, aa=True)["scored"]
    assert rows["d"]["unscored"] == "no finite speedup on every workload"
    assert rows["e"]["unscored"] == "not applicable"
    lib = _row("f", tp={"w": 1.05})
    lib["evidence"]["slots"]["rms_norm"]["kernel_library"] = "vllm"  # fk-vllm-moe: vLLM's kernels, required
    assert agg.per_scenario(lib)["unscored"] == "a library's kernels, not the plugin's"
    unnamed = _row("h", tp={"w": 1.05}, slots={"rms_norm": "exercised", "silu_and_mul": "exercised"})
    unnamed["evidence"]["slots"]["rms_norm"]["unnamed"] = True  # declares no names, on a device
    unnamed["evidence"]["slots"]["silu_and_mul"]["engine_own"] = True
    assert agg.per_scenario(unnamed)["unscored"].startswith("kernels that declare no names")
    del unnamed["evidence"]["slots"]["silu_and_mul"]["engine_own"]  # one kernel of the plugin's own, proven
    assert agg.per_scenario(unnamed)["scored"]
    md = agg.markdown(agg.summarize({"interleave": 3, "scenarios": [own]}, categories={"a": "X"}))
    assert "| no (the engine's own kernels) |" in md and "- score (overall x correctness x coverage): -" in md


def test_a_run_that_timed_some_workloads_claims_no_speedup():
    """fk run --workloads: a geomean over the workloads the user picked is not the scenario's speedup."""
    fast = _row("a", tp={"b": 2.0}, lat={"b1": 0.5})
    whole = agg.summarize({"interleave": 3, "scenarios": [fast]}, categories={"a": "X"})
    assert whole["scenarios"][0]["scored"] and whole["overall"]["score"] == pytest.approx(2.0)
    some = agg.summarize({"interleave": 3, "workloads": ["latency"], "scenarios": [fast]}, categories={"a": "X"})
    assert not some["scenarios"][0]["scored"] and some["scenarios"][0]["unscored"] == agg.SUBSET
    assert some["overall"]["speedup"] is None and some["overall"]["score"] is None
    assert f"no ({agg.SUBSET})" in agg.markdown(some)
