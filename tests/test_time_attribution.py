"""The profiled runs against the timed delta: per round, then over the rounds."""
import pytest

from fk_adapters import op_families, report, time_attribution

BASE_KERNELS = ({"copy": 10.0, "nvjet_gemm": 800.0}, [(0, 10, "copy"), (10, 810, "nvjet_gemm")])
# +100 µs device time, +100 µs waiting on its launch: the kernels' delta is +200 µs a run
CAND_KERNELS = ({"copy": 10.0, "fk_triton_gemm_kernel": 900.0},
                [(0, 10, "copy"), (110, 1010, "fk_triton_gemm_kernel")])


def _res(kernels, latency_s, wall_s=None, profiled=True):
    """One engine process's result: its timed repeats of latency batch32 and, where ``profiled``, its profiled run."""
    res = {"perf": {"latency": {"batch32": [{"latency_s": latency_s * f} for f in (0.999, 1.0, 1.001)]}}}
    if profiled:
        kernel_us, timeline = kernels
        res["profile"] = [{"pid": 1, "kernels": {k: 1 for k in kernel_us}, "kernel_us": kernel_us,
                           **op_families.span_busy(timeline)}]
    if wall_s is not None:
        res["profile_wall_s"] = wall_s
    return res


def _pair(base_s, cand_s, **kw):
    return _res(BASE_KERNELS, base_s, **kw), _res(CAND_KERNELS, cand_s, **kw)


def _paced(pairs, paces):
    """Each round's profiles given five host ranges run as often, the candidate's taking ``pace`` x the baseline's."""
    names = [f"r{i}" for i in range(5)]
    for (base, cand), f in zip(pairs, paces):
        base["profile"][0].update(host_us={n: 2000.0 for n in names}, host_calls={n: 7 for n in names})
        cand["profile"][0].update(host_us={n: 2000.0 * f for n in names}, host_calls={n: 7 for n in names})
    return pairs


def test_one_round_is_set_against_its_processes_timed_delta():
    t = time_attribution.against_timed([_pair(0.00100, 0.00122)], "batch32")  # timed: +220 µs a run
    assert t["workload"] == "latency batch32" and t["timed_delta_us"] == pytest.approx(220.0)
    assert t["kernels_delta_us"] == 200.0 and t["named_share"] == pytest.approx(200 / 220) and t["accounts"] is True
    assert t["profiled_speedup"] == pytest.approx(810 / 1010) and t["timed_speedup"] == pytest.approx(1 / 1.22)
    assert "share_interval" not in t  # one round: no interval
    row = {"scenario": "x", "time_split": {**_split(), "timed": t}, "perf": {}}
    text = "\n".join(report._time_split_lines([row]))
    assert "one run of **latency batch32**" in text and "**91%** of the timed delta of +0.2 ms a run" in text
    assert "accounts for the timed delta" in text and "--interleave 3" not in text


def test_a_gap_in_one_round_asks_for_rounds_and_a_still_delta_is_not_attributed():
    far = time_attribution.against_timed([_pair(0.00100, 0.00200)], "batch32")  # the kernels name 20%
    assert far["accounts"] is False
    text = "\n".join(time_attribution.timed_lines(far))
    assert "does not account for the timed delta" in text and "run --interleave 3 or more" in text
    still = time_attribution.against_timed([_pair(0.00100, 0.001005)], "batch32")
    assert still["accounts"] is None and "nothing to attribute" in "\n".join(time_attribution.timed_lines(still))


def test_nothing_is_claimed_without_a_profiled_timed_workload_or_the_waits():
    pair = _pair(0.001, 0.0012)
    assert time_attribution.against_timed([pair], None) is None  # no workload profiled
    assert time_attribution.against_timed([pair], "batch1") is None  # not timed
    no_waits = tuple(dict(r, profile=[{"pid": 1, "kernels": {"k": 1}, "kernel_us": {"k": 1.0}}]) for r in pair)
    assert time_attribution.against_timed([no_waits], "batch32") is None  # an older profile: no claim


def test_rounds_pool_the_timed_and_kernels_deltas_with_an_interval_from_their_gaps():
    """Session 51: one pair of processes read 67% where earlier pairs' timed deltas were 40% smaller; over rounds
    the timed delta's variation between processes is averaged, and the interval shows what is left of it."""
    pairs = [_pair(0.00100, c) for c in (0.00125, 0.00115, 0.00126)]  # timed +250, +150, +260; kernels +200 each
    t = time_attribution.against_timed(pairs, "batch32")
    assert [r["timed_delta_us"] for r in t["rounds"]] == pytest.approx([250.0, 150.0, 260.0])
    assert t["timed_delta_us"] == pytest.approx(220.0) and t["named_share"] == pytest.approx(200 / 220)
    lo, hi = t["share_interval"]
    assert lo < 200 / 220 < hi and hi - lo > 0.5  # 3 rounds, gaps of +50, -50, +60 µs: a wide interval
    text = "\n".join(time_attribution.timed_lines(t))
    assert "in each of 3 interleaved rounds" in text and "(means over the rounds)" in text
    assert f"[95% interval {100 * lo:.0f}%, {100 * hi:.0f}%]" in text
    assert "within 80%-125% as an estimate, but its interval reaches outside" in text  # not "accounts" outright
    assert "so the table above accounts" not in text
    assert ("Per round, timed delta / kernels' delta (ms a run): 1: +0.2 / +0.2 (device +0.1, waits +0.1); "
            "2: +0.1 / +0.2 (device +0.1, waits +0.1)") in text
    unprofiled = (_res(BASE_KERNELS, 0.001, profiled=False), _res(CAND_KERNELS, 0.0013, profiled=False))
    assert len(time_attribution.against_timed(pairs[:2] + [unprofiled], "batch32")["rounds"]) == 2


def test_the_profiled_runs_wall_time_shows_the_profilers_cost_on_each_side():
    t = time_attribution.against_timed([_pair(0.00100, 0.00122, wall_s=None)], "batch32")
    assert "profiler_cost_us" not in t
    base, cand = _pair(0.00100, 0.00122)
    base["profile_wall_s"], cand["profile_wall_s"] = 0.00103, 0.00124  # the profiler: +30 µs and +20 µs
    t = time_attribution.against_timed([(base, cand)], "batch32")
    assert t["profiler_cost_us"] == pytest.approx([30.0, 20.0]) and t["profiled_wall_delta_us"] == pytest.approx(210.0)
    assert t["profiled_share"] == pytest.approx(200 / 210)
    text = "\n".join(time_attribution.timed_lines(t))
    assert "took +0.2 ms longer in the candidate (wall time); the kernels name 95% of that" in text
    assert "lengthened the baseline's run by +0.0 ms and the candidate's by +0.0 ms" in text


def _split():
    from fk_adapters import time_split

    return time_split.split(_res(BASE_KERNELS, 0.001)["profile"], _res(CAND_KERNELS, 0.001)["profile"])


def _walled(base_s, cand_s, base_wall, cand_wall):
    base, cand = _pair(base_s, cand_s)
    base["profile_wall_s"], cand["profile_wall_s"] = base_wall, cand_wall
    return base, cand


def test_rounds_tell_a_profiled_run_that_strays_from_the_timed_medians_from_time_the_kernels_miss():
    """Session 52: over 3 rounds the kernels named 108% [4%, 212%] of the timed delta, while each round's kernels
    named its profiled runs' own wall-time delta (99% over the rounds): the spread is one profiled run against the
    timed medians."""
    # timed +250, +150, +260 µs; the profiled runs' own delta +205, +198, +202 µs; the kernels +200 each
    pairs = [_walled(0.00100, c, 0.00100, 0.00100 + w) for c, w in
             ((0.00125, 0.000205), (0.00115, 0.000198), (0.00126, 0.000202))]
    t = time_attribution.against_timed(pairs, "batch32")
    lo, hi = t["profiled_share_interval"]
    assert 0.9 < lo < t["profiled_share"] < hi < 1.05 and t["share_interval"][1] - t["share_interval"][0] > 0.5
    text = "\n".join(time_attribution.timed_lines(t))
    assert f"the kernels name 99% [95% interval {100 * lo:.0f}%, {100 * hi:.0f}%] of that" in text
    assert "not time the kernels miss" in text
    assert ("Per round, timed delta / profiled runs' delta (wall time) / kernels' delta (ms a run): "
            "1: +0.2 / +0.2 / +0.2 (device +0.1, waits +0.1); 2: +0.1 / +0.2 / +0.2") in text
    # the profiled runs' own delta strays from the kernels' too: no such reading
    pairs = [_walled(0.00100, c, 0.00100, 0.00100 + w) for c, w in
             ((0.00125, 0.000300), (0.00115, 0.000150), (0.00126, 0.000400))]
    t = time_attribution.against_timed(pairs, "batch32")
    assert not time_attribution._within(t["profiled_share_interval"])
    assert "not time the kernels miss" not in "\n".join(time_attribution.timed_lines(t))
    assert time_attribution.against_timed(pairs[:2], "batch32")["profiled_share_interval"] is None  # 2 rounds


def test_the_kernels_delta_splits_into_device_time_and_the_waits_on_the_host_each_with_its_interval():
    """Session 52's A/B: the kernels' device time moved +37 to +42 ms a run in every round, the waits before their
    launches -4 to +35 ms: the split says which part carries the rounds' spread."""
    waits = (0, 400, 500)  # µs more wait before the candidate's gemm launches, by round; its device time +100 µs
    pairs = []
    for w in waits:
        base = _res(BASE_KERNELS, 0.00100)
        cand = _res(({"copy": 10.0, "fk_triton_gemm_kernel": 900.0},
                     [(0, 10, "copy"), (10 + w, 910 + w, "fk_triton_gemm_kernel")]), 0.00100 + (100 + w) * 1e-6)
        pairs.append((base, cand))
    t = time_attribution.against_timed(pairs, "batch32")
    assert [r["device_delta_us"] for r in t["rounds"]] == [100.0, 100.0, 100.0]
    assert t["device_delta_us"] == 100.0 and t["device_interval_us"] == [100.0, 100.0]
    assert t["wait_delta_us"] == 300.0 and t["wait_interval_us"][0] < 0 < 600 < t["wait_interval_us"][1]
    text = "\n".join(time_attribution.timed_lines(t))
    assert "Of that, the kernels' device time moved +0.1 ms [95% interval +0.1, +0.1] (25% of the timed delta)" in text
    assert "waits on the host before their launches +0.3 ms [95% interval" in text
    one = time_attribution.against_timed(pairs[:1], "batch32")
    assert one["device_interval_us"] is None and "moved +0.1 ms (100% of the timed delta)" in "\n".join(
        time_attribution.timed_lines(one))


def test_a_share_that_is_the_same_in_every_round_has_no_width():
    """Kernels naming 90% of every round's delta, whatever its size: the share is 0.9 exactly. The interval is the
    ratio estimator's (kernels - S x timed), not the unexplained part's over a fixed mean (audit, s53)."""
    rounds = [{"timed": t, "kernels_delta_us": 0.9 * t} for t in (10.0, 20.0, 30.0)]
    assert time_attribution.share_interval(rounds, "timed") == pytest.approx([0.9, 0.9])
    assert time_attribution.share_interval(rounds[:2], "timed") is None


def test_each_rounds_host_pace_is_named_beside_its_deltas():
    """Session 57: the candidate's host ran x1.12, x0.60, x1.30 the baseline's time round by round, and the timed
    latency delta followed it: each round's pace is printed with its deltas."""
    pairs = _paced([_pair(0.00100, c) for c in (0.00125, 0.00115, 0.00126)], (1.12, 0.6, 1.3))
    t = time_attribution.against_timed(pairs, "batch32")
    assert [r["host_pace"] for r in t["rounds"]] == pytest.approx([1.12, 0.6, 1.3])
    assert ("The candidate's host took x1.12 / x0.60 / x1.30 the baseline's time for the same host work, round by "
            "round") in "\n".join(time_attribution.timed_lines(t))
    gap = [pairs[0], (_res(BASE_KERNELS, 0.001, profiled=False), pairs[1][1]), pairs[2]]  # round 2 unprofiled
    assert [r["round"] for r in time_attribution.against_timed(gap, "batch32")["rounds"]] == [1, 3]
    del pairs[1][1]["profile"][0]["host_us"]  # a round without it: no pace line
    assert "host took" not in "\n".join(time_attribution.timed_lines(time_attribution.against_timed(pairs, "batch32")))


def test_a_still_delta_over_rounds_still_names_each_rounds_host_pace():
    """Session 58: the passthrough's timed delta was under 1% of stock's, nothing to attribute; the paces (x1.01,
    x1.01, x0.99, x1.01) are what say the two sides' hosts ran alike."""
    pairs = _paced([_pair(0.00100, c) for c in (0.001005, 0.000998, 0.001003)], (1.014, 0.992, 1.005))
    t = time_attribution.against_timed(pairs, "batch32")
    text = "\n".join(time_attribution.timed_lines(t))
    assert t["accounts"] is None and "nothing to attribute." in text
    assert "The candidate's host took x1.01 / x0.99 / x1.00 the baseline's time for the same host work" in text
    one = time_attribution.against_timed(pairs[:1], "batch32")  # one round: its pace is the host line's
    assert "host took" not in "\n".join(time_attribution.timed_lines(one))
