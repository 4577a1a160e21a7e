import math
import random
import statistics

import pytest

from fk_adapters import stats


def _noisy(rng, center, rel_sd, n, factors=None):
    factors = factors or [1.0] * n
    return [center * f * (1 + rng.gauss(0, rel_sd)) for f in factors]


def test_interval_covers_the_true_ratio_of_synthetic_data():
    """Over 60 synthetic data sets with a true ratio of 1.03, the 95% interval covers it in most of them and the
    point estimate is close; it is not trivially wide either."""
    rng = random.Random(1)
    covered, widths = 0, []
    for k in range(60):
        base, cand = _noisy(rng, 100.0, 0.02, 15), _noisy(rng, 103.0, 0.02, 15)
        ci = stats.bootstrap_ratio(base, cand, paired=False, n_boot=400, seed=k)
        assert ci["lo"] <= ci["ratio"] <= ci["hi"]
        assert abs(ci["ratio"] - 1.03) < 0.03
        covered += ci["lo"] <= 1.03 <= ci["hi"]
        widths.append(ci["hi"] - ci["lo"])
    assert covered >= 51, covered  # >= 85% of 60
    assert max(widths) < 0.06 and ci["n"] == 15 and ci["paired"] is False


def test_a_single_repeat_has_no_interval():
    ci = stats.bootstrap_ratio([100.0], [50.0], paired=True)
    assert ci["ratio"] == ci["lo"] == ci["hi"] == 0.5
    assert ci["n"] == 1 and ci["note"] == stats.NO_INTERVAL
    # judged on the point: a halved throughput is beyond any small floor, a 1% change is not
    assert stats.significant(ci, 0.05, higher_is_better=True) == stats.SLOWER
    assert stats.significant(stats.bootstrap_ratio([100.0], [101.0], True), 0.02, True) == stats.NO_CHANGE


def test_paired_resampling_keeps_pairs_together():
    """Repeats whose level wanders (machine state) but where the candidate is always exactly 5% faster than its
    partner: paired, every resample gives 1.05; independent resampling mixes levels and is wide."""
    levels = [60.0, 140.0, 90.0, 120.0, 75.0, 105.0, 130.0, 85.0]
    base = levels
    cand = [x * 1.05 for x in levels]
    paired = stats.bootstrap_ratio(base, cand, paired=True, seed=3)
    indep = stats.bootstrap_ratio(base, cand, paired=False, seed=3)
    assert paired["ratio"] == pytest.approx(1.05) and indep["ratio"] == pytest.approx(1.05)
    assert paired["lo"] == pytest.approx(1.05) and paired["hi"] == pytest.approx(1.05)
    assert indep["hi"] - indep["lo"] > 0.3
    assert stats.significant(paired, 0.02, True) == stats.FASTER
    assert stats.significant(indep, 0.02, True) == stats.NO_CHANGE


def test_paired_needs_equal_lengths_and_every_side_a_value():
    with pytest.raises(ValueError, match="paired"):
        stats.bootstrap_ratio([1.0, 2.0], [1.0], paired=True)
    with pytest.raises(ValueError, match="at least one"):
        stats.bootstrap_ratio([], [1.0], paired=False)
    assert stats.bootstrap_ratio([1.0, 2.0, 3.0], [2.0], paired=False)["note"] == stats.NO_INTERVAL


def test_zeros():
    both = stats.bootstrap_ratio([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], paired=True)
    assert both["ratio"] == both["lo"] == both["hi"] == 1.0
    assert stats.significant(both, 0.0, True) == stats.NO_CHANGE
    from_zero = stats.bootstrap_ratio([0.0, 0.0, 0.0], [1.0, 2.0, 3.0], paired=True)
    assert math.isinf(from_zero["ratio"]) and math.isinf(from_zero["lo"])
    assert stats.significant(from_zero, 0.1, True) == stats.FASTER
    to_zero = stats.bootstrap_ratio([1.0, 2.0, 3.0], [0.0, 0.0, 0.0], paired=False)
    assert to_zero["ratio"] == to_zero["hi"] == 0.0
    assert stats.significant(to_zero, 0.1, True) == stats.SLOWER


def test_the_same_seed_gives_the_same_interval():
    rng = random.Random(5)
    base, cand = _noisy(rng, 100, 0.03, 7), _noisy(rng, 100, 0.03, 7)
    a = stats.bootstrap_ratio(base, cand, paired=True, seed=11)
    assert a == stats.bootstrap_ratio(base, cand, paired=True, seed=11)
    assert a["lo"] < a["hi"]


def test_significance_in_both_directions_and_the_latency_flip():
    up, down = {"ratio": 1.06, "lo": 1.05, "hi": 1.08}, {"ratio": 0.93, "lo": 0.9, "hi": 0.95}
    assert stats.significant(up, 0.02, higher_is_better=True) == stats.FASTER
    assert stats.significant(up, 0.02, higher_is_better=False) == stats.SLOWER  # latency went up
    assert stats.significant(down, 0.02, higher_is_better=True) == stats.SLOWER
    assert stats.significant(down, 0.02, higher_is_better=False) == stats.FASTER  # latency went down
    # outside 1 but inside the floor, or straddling its edge: not significant
    assert stats.significant({"lo": 1.01, "hi": 1.015}, 0.02, True) == stats.NO_CHANGE
    assert stats.significant({"lo": 1.01, "hi": 1.015}, 0.0, True) == stats.FASTER
    assert stats.significant({"lo": 1.015, "hi": 1.08}, 0.02, True) == stats.NO_CHANGE
    assert stats.significant({"lo": 0.9, "hi": 1.1}, 0.0, False) == stats.NO_CHANGE
    assert stats.significant({"ratio": None}, 0.02, True) == stats.NO_CHANGE
    with pytest.raises(ValueError):
        stats.significant(up, -0.1, True)


def test_noise_floor_is_the_widest_reach_from_one():
    floor = stats.noise_floor([{"ratio": 1.0, "lo": 0.98, "hi": 1.01}, {"ratio": 1.02, "lo": 0.99, "hi": 1.04},
                               (0.97, 1.0), 1.02, {"ratio": 0.985}])
    assert floor == pytest.approx(0.04)
    assert stats.noise_floor([(0.95, 0.99)]) == pytest.approx(0.05)  # an A/A off 1 counts in full
    with pytest.raises(ValueError):
        stats.noise_floor([])


def test_aa_like_data_is_no_change_and_a_3_percent_slowdown_is_slower():
    rng = random.Random(7)
    # A/A on a machine with ~1% noise, interleaved: the floor from one A/A, then a second A/A judged against it
    drift = [1 + rng.gauss(0, 0.02) for _ in range(10)]
    aa1 = stats.bootstrap_ratio(_noisy(rng, 100, 0.01, 10, drift), _noisy(rng, 100, 0.01, 10, drift), paired=True)
    floor = stats.noise_floor([aa1])
    assert 0 < floor < 0.03
    drift = [1 + rng.gauss(0, 0.02) for _ in range(10)]
    aa2 = stats.bootstrap_ratio(_noisy(rng, 100, 0.01, 10, drift), _noisy(rng, 100, 0.01, 10, drift), paired=True)
    assert aa2["lo"] <= 1.0 <= aa2["hi"]
    assert stats.significant(aa2, floor, True) == stats.NO_CHANGE
    assert stats.significant(aa2, floor, False) == stats.NO_CHANGE
    # the candidate 3% slower, noise 0.5% per run: throughput down and latency up are both "slower"
    drift = [1 + rng.gauss(0, 0.02) for _ in range(8)]
    base, cand = _noisy(rng, 100, 0.005, 8, drift), _noisy(rng, 97, 0.005, 8, drift)
    tput = stats.bootstrap_ratio(base, cand, paired=True)
    assert tput["hi"] < 0.99 and tput["lo"] > 0.95
    assert stats.significant(tput, 0.01, higher_is_better=True) == stats.SLOWER
    lat = stats.bootstrap_ratio(cand, base, paired=True)  # seconds: the slow side takes longer
    assert stats.significant(lat, 0.01, higher_is_better=False) == stats.SLOWER
    assert stats.significant(tput, 0.05, higher_is_better=True) == stats.NO_CHANGE  # within a 5% floor


def test_ratio_of_ratios():
    rng = random.Random(9)
    drift = [1 + rng.gauss(0, 0.03) for _ in range(8)]
    bb, bc = _noisy(rng, 100, 0.004, 8, drift), _noisy(rng, 110, 0.004, 8, drift)  # BASE: +10%
    drift = [1 + rng.gauss(0, 0.03) for _ in range(8)]
    hb, hc = _noisy(rng, 90, 0.004, 8, drift), _noisy(rng, 95.7, 0.004, 8, drift)  # HEAD: +6.3% on a slower host
    d = stats.bootstrap_ratio_of_ratios(bb, bc, hb, hc, True, True)
    assert d["ratio"] == pytest.approx((statistics.median(hc) / statistics.median(hb))
                                       / (statistics.median(bc) / statistics.median(bb)))
    assert d["lo"] <= 95.7 / 90 / 1.1 <= d["hi"]
    assert stats.significant(d, 0.01, True) == stats.SLOWER
    assert d["paired_base"] and d["paired_head"] and d["n"] == 8
    single = stats.bootstrap_ratio_of_ratios([1.0], [1.0], hb, hc, True, True)
    assert single["note"] == stats.NO_INTERVAL and single["lo"] == single["hi"]


def test_a_delta_over_shared_baselines_pairs_the_two_candidates_round_by_round():
    """--with-aa: BASE (the A/A) and HEAD (the candidate) timed against the same stock processes. A slow or fast
    baseline process moves both ratios alike and cancels: the interval is the candidates' own, round by round; as two
    independent runs (Welch) the baselines' spread would count twice."""
    base = [100.0, 80.0, 120.0, 95.0, 110.0]  # process to process: +-20%
    partner = [101.0, 100.0, 99.0, 100.5, 99.5]
    cand = [96.0, 95.0, 94.5, 95.5, 94.0]
    shared = stats.rounds_delta_interval(base, partner, base, cand, shared=True)
    alone = stats.rounds_interval(partner, cand)
    assert (shared["ratio"], shared["lo"], shared["hi"]) == (alone["ratio"], alone["lo"], alone["hi"])
    assert shared["hi"] < 1.0 and "shared baselines" in shared["method"]  # 5% slower, and the interval says so
    welch = stats.rounds_delta_interval(base, partner, base, cand)
    assert welch["ratio"] == pytest.approx(shared["ratio"]) and welch["hi"] > 1.0  # wider: it cannot tell
