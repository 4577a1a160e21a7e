"""A plugin that changes nothing (passthrough) measured in noisy engine processes must never read as a significant
speedup: one pair shows no interval and no significance; interleaved rounds give t-intervals of the right width."""
import copy
import random

from fk_adapters import aggregates, compare, metrics, report, stats, variation

PROCESS_SIGMA = 0.10  # log-normal spread of one engine process's speed (seen: up to +-20% on an H100)
REPEAT_SIGMA = 0.005  # repeats inside one process barely differ


def _process(rng, repeats=5, base=1000.0):
    """One engine process's throughput repeats: its own speed, then small repeat noise."""
    speed = base * rng.lognormvariate(0.0, PROCESS_SIGMA)
    return [speed * rng.lognormvariate(0.0, REPEAT_SIGMA) for _ in range(repeats)]


def _row(perf):
    return {"scenario": "s", "status": "PASSED", "failures": [], "dtype": "bfloat16", "baseline": {}, "candidate": {},
            "correctness": {"passed": True, "failures": []},
            "evidence": {"slots": {"rms_norm": {"plugin": "passthrough", "kernel": "engine:rms_norm",
                                              "entered": ["RMSNorm"],
                                              "layers": 4, "calls": 9, "traced": 0, "profiler_hits": 0,
                                              "profiled": False, "status": "exercised", "proof": "9 calls"}}},
            "perf": perf}


def _results(perf, rounds):
    return {"fk_version": "0", "created": "now", "command": "fk run", "host": "h", "quick": False,
            "engine": "vllm", "engine_version": "0.26.0", "device": "cuda", "mode": "compiled", "aa": False,
            "candidate": "passthrough", "plugins": ["passthrough"], "interleave": rounds, "verdict": "PASS",
            "problems": [], "scenarios": [_row(perf)]}


def single_pair(seed):
    rng = random.Random(seed)
    base, cand = _process(rng), _process(rng)
    return _results({"throughput": {"w": {"tokens_per_s": metrics.ratio(base, cand)}}, "latency": {}}, 1)


def interleaved(seed, rounds=3):
    rng = random.Random(seed)
    b = [{"throughput": {"w": [{"tokens_per_s": v} for v in _process(rng)]}} for _ in range(rounds)]
    c = [{"throughput": {"w": [{"tokens_per_s": v} for v in _process(rng)]}} for _ in range(rounds)]
    return _results(metrics.performance_rounds(b, c), rounds)


def test_a_single_noisy_pair_shows_no_interval_no_significance_and_says_so():
    flattering = 0
    for seed in range(200):
        res = single_pair(seed)
        r = res["scenarios"][0]["perf"]["throughput"]["w"]["tokens_per_s"]
        within = stats.bootstrap_ratio(r["baseline"]["values"], r["candidate"]["values"], paired=False)
        flattering += within["lo"] > 1.02  # what the within-process bootstrap used to show as a speedup
        assert variation.interval(r, res) is None and variation.why_not(res) == variation.SINGLE_PAIR
        summary = aggregates.summarize(res, categories={"s": "c"})
        assert summary["not_significant"] and "**not significant**" in aggregates.markdown(summary)
        other = single_pair(seed + 1000)
        cmp = compare.compare(other, res)  # no floor, one process per side: nothing is judged
        assert cmp["summary"]["faster"] == 0 and cmp["verdict"] == "INCOMPLETE"
    assert flattering > 40  # the old interval called a do-nothing plugin faster this often
    text = report.render(single_pair(0))
    assert "none (single pair)" in text and "No interval, no significance" in text


def test_interleaved_rounds_give_intervals_that_cover_no_change_at_their_nominal_rate():
    t_misses = bootstrap_misses = 0
    for seed in range(300):
        res = interleaved(seed)
        r = res["scenarios"][0]["perf"]["throughput"]["w"]["tokens_per_s"]
        iv = variation.interval(r, res)
        assert iv["method"] == "t over rounds" and iv["n"] == 3
        t_misses += not iv["lo"] <= 1.0 <= iv["hi"]
        old = stats.bootstrap_ratio(r["baseline"]["values"], r["candidate"]["values"], paired=True)
        bootstrap_misses += not old["lo"] <= 1.0 <= old["hi"]
    assert t_misses <= 0.08 * 300  # 95% intervals: about 5% miss
    assert bootstrap_misses > 0.15 * 300  # the percentile bootstrap over 3 rounds spans only what it saw


def test_compare_never_calls_a_passthrough_faster_than_an_aa_of_the_same_machine():
    for seed in range(100):
        aa = interleaved(seed)
        aa.update(aa=True, candidate="baseline (A/A)", plugins=[])
        head = interleaved(seed + 5000)
        floor = compare.noise_floor_from_aa(copy.deepcopy(aa))
        cmp = compare.compare(aa, head, noise_floor=floor)
        assert cmp["summary"]["faster"] == 0, (seed, cmp["perf"][0]["delta"])


def test_a_workload_with_too_few_pairs_or_a_zero_gets_no_interval():
    """The run ran 3 rounds, but a round that timed nothing on a side left 2 pairs; a 0 is no ratio (audit, s53)."""
    run = {"interleave": 3, "scenarios": []}
    two = {"ratio": 1.1, "baseline": {"values": [100.0, 101.0]}, "candidate": {"values": [110.0, 111.0]}}
    assert variation.interval(two, run) is None
    zero = {"ratio": 1.1, "baseline": {"values": [100.0, 101.0, 99.0]}, "candidate": {"values": [110.0, 0.0, 109.0]}}
    assert variation.interval(zero, run) is None
    three = {"ratio": 1.1, "baseline": {"values": [100.0, 101.0, 99.0]}, "candidate": {"values": [110.0, 111.0, 109.0]}}
    assert variation.interval(three, run)["n"] == 3
