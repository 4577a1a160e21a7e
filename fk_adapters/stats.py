"""Ratios of medians with percentile-bootstrap intervals, the A/A noise floor, and significance against it.

Pure Python (``random.Random`` seeded per call, so every interval is reproducible). Used by ``fk compare``.

Definitions
-----------
ratio
    median(candidate) / median(baseline). For throughput (higher is better) > 1 is faster; for latency
    (lower is better) < 1 is faster.
interval
    The percentile bootstrap of that ratio: ``n_boot`` resamples with replacement, the ratio of medians of each,
    and the ``(1 - conf) / 2`` and ``(1 + conf) / 2`` quantiles of those (linear interpolation). *Paired*
    resampling draws repeat indices and keeps baseline_i and candidate_i together: right for interleaved
    rounds (A B, B A, ...), where the two runs of a pair share the machine's state at that moment. *Independent*
    resampling draws each side on its own: right when the sides ran apart (one process per side, repeats in it).
    With fewer than 2 values on a side there is no interval: it is [ratio, ratio] and ``note`` says
    "n<2: no interval". With 3 to 5 repeats the percentile bootstrap of a median is coarse and tends to be narrow
    (it can only take the values the samples offer): that is what the noise floor is there to absorb.
division by zero
    x / 0 is +inf for x > 0 and 1.0 for 0 / 0 (both sides measured nothing: no change).
"""
from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterable, Sequence

NO_INTERVAL = "n<2: no interval"
FASTER, SLOWER, NO_CHANGE = "faster", "slower", "no change"


def _div(a: float, b: float) -> float:
    if b == 0:
        return 1.0 if a == 0 else math.inf
    return a / b


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between the order statistics around q * (n - 1)."""
    pos = q * (len(sorted_values) - 1)
    i = int(math.floor(pos))
    j = min(i + 1, len(sorted_values) - 1)
    a, b, frac = sorted_values[i], sorted_values[j], pos - i
    if a == b or frac == 0:
        return a
    if math.isinf(a) or math.isinf(b):
        return b if frac >= 0.5 else a
    return a + (b - a) * frac


def _sampler(base: Sequence[float], cand: Sequence[float], paired: bool, rng: random.Random):
    """A function drawing one bootstrap replicate of median(cand) / median(base)."""
    med = statistics.median
    if paired:
        n = len(base)

        def draw() -> float:
            idx = [rng.randrange(n) for _ in range(n)]
            return _div(med([cand[i] for i in idx]), med([base[i] for i in idx]))
    else:
        def draw() -> float:
            return _div(med(rng.choices(cand, k=len(cand))), med(rng.choices(base, k=len(base))))
    return draw


def _check(base: Sequence[float], cand: Sequence[float], paired: bool) -> None:
    if not base or not cand:
        raise ValueError("a ratio needs at least one value on each side")
    if paired and len(base) != len(cand):
        raise ValueError(f"paired resampling needs as many baseline as candidate values ({len(base)} != {len(cand)})")


def _interval(point: float, draws: list, n: int, n_boot: int, conf: float, seed: int, extra: dict) -> dict:
    out = {"ratio": point, "lo": point, "hi": point, "n": n, "conf": conf, **extra}
    if n < 2:
        out["note"] = NO_INTERVAL
        return out
    rng = random.Random(seed)
    samplers = [make(rng) for make in draws]
    reps = []
    for _ in range(n_boot):
        v = 1.0
        for sign, draw in samplers:
            r = draw()
            v = v * r if sign > 0 else _div(v, r)
        reps.append(v)
    reps.sort()
    alpha = (1.0 - conf) / 2
    out["lo"], out["hi"] = _quantile(reps, alpha), _quantile(reps, 1.0 - alpha)
    return out


def bootstrap_ratio(base: list[float], cand: list[float], paired: bool, n_boot: int = 2000, conf: float = 0.95,
                    seed: int = 0) -> dict:
    """median(cand) / median(base) with its percentile bootstrap interval (see the module docstring).

    Returns {"ratio", "lo", "hi", "n", "paired", "conf"} (+ "note" when n < 2). ``n`` is the number of pairs
    (paired) or the smaller side's count (independent). Raises ValueError for an empty side, or for paired
    resampling of sides of different lengths."""
    base, cand = [float(x) for x in base], [float(x) for x in cand]
    _check(base, cand, paired)
    point = _div(statistics.median(cand), statistics.median(base))
    n = min(len(base), len(cand))
    return _interval(point, [lambda rng: (1, _sampler(base, cand, paired, rng))], n, n_boot, conf, seed,
                     {"paired": paired})


def bootstrap_ratio_of_ratios(base_b: list[float], base_c: list[float], head_b: list[float], head_c: list[float],
                              paired_base: bool, paired_head: bool, n_boot: int = 2000, conf: float = 0.95,
                              seed: int = 0) -> dict:
    """(median(head_c) / median(head_b)) / (median(base_c) / median(base_b)): how much HEAD's candidate/baseline
    ratio moved against BASE's, with its percentile bootstrap interval. The two results files are independent
    runs, so each is resampled on its own (paired within a file when that file's repeats were interleaved).

    Returns {"ratio", "lo", "hi", "n", "paired_base", "paired_head", "conf"} (+ "note" when a side has n < 2)."""
    sides = [[float(x) for x in v] for v in (base_b, base_c, head_b, head_c)]
    base_b, base_c, head_b, head_c = sides
    _check(base_b, base_c, paired_base)
    _check(head_b, head_c, paired_head)
    med = statistics.median
    point = _div(_div(med(head_c), med(head_b)), _div(med(base_c), med(base_b)))
    n = min(len(v) for v in sides)
    draws = [lambda rng: (1, _sampler(head_b, head_c, paired_head, rng)),
             lambda rng: (-1, _sampler(base_b, base_c, paired_base, rng))]
    return _interval(point, draws, n, n_boot, conf, seed, {"paired_base": paired_base, "paired_head": paired_head})


def half_width(interval) -> float:
    """How far an interval (or a bare ratio) reaches from 1: max(|1 - lo|, |hi - 1|)."""
    if isinstance(interval, dict):
        lo, hi = interval.get("lo", interval.get("ratio")), interval.get("hi", interval.get("ratio"))
    elif isinstance(interval, (tuple, list)):
        lo, hi = interval
    else:
        lo = hi = interval
    if lo is None or hi is None:
        raise ValueError(f"no ratio in {interval!r}")
    return max(abs(1.0 - lo), abs(hi - 1.0))


def noise_floor(aa_intervals: Iterable) -> float:
    """The machine's noise floor from an A/A comparison (stock engine on both sides, nothing changed).

    Definition: the largest distance from 1 that any A/A ratio interval reaches, over every workload and metric:
    ``max over intervals of max(|1 - lo|, |hi - 1|)``. Each item is a dict with "lo"/"hi" (as
    ``bootstrap_ratio`` returns; a dict with only "ratio" counts as [ratio, ratio]), a (lo, hi) pair, or a bare
    ratio. It is a relative half-width: a ratio between 1 - floor and 1 + floor is what this machine gives when
    nothing changed, so only an interval lying entirely outside that band is a real change (``significant``).
    It holds both the A/A ratio's offset from 1 (an A/A systematically off 1 means the sides are not measured
    alike: process order, warm-up, clocks) and its sampling spread. Raises ValueError when there is nothing."""
    widths = [half_width(iv) for iv in aa_intervals]
    if not widths:
        raise ValueError("no A/A ratio to derive a noise floor from")
    return max(widths)


def significant(ci: dict, floor: float, higher_is_better: bool) -> str:
    """"faster", "slower" or "no change" for a ratio interval (candidate / baseline).

    Significant only when the whole interval lies outside [1 - floor, 1 + floor] (strictly): lo > 1 + floor is
    an increase, hi < 1 - floor a decrease. An increase is "faster" when higher is better (throughput) and
    "slower" when lower is better (latency); a decrease the other way round. An interval with n < 2 is its point,
    so a single repeat is judged on the point against the floor (the caller shows it is not an interval).
    A missing ratio is "no change"."""
    if floor < 0:
        raise ValueError(f"negative noise floor {floor}")
    lo, hi = ci.get("lo", ci.get("ratio")), ci.get("hi", ci.get("ratio"))
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return NO_CHANGE
    if lo > 1.0 + floor:
        return FASTER if higher_is_better else SLOWER
    if hi < 1.0 - floor:
        return SLOWER if higher_is_better else FASTER
    return NO_CHANGE


# Two-sided 95% quantiles of Student's t by degrees of freedom (beyond the table: the next smaller df's, wider).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000}


def t95(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom (between tabled ones: the wider)."""
    return _T95[max(k for k in _T95 if k <= df)] if df < 120 else 1.96


def positive_finite(x) -> bool:
    """A measured rate, time or ratio that can stand in a ratio: a number, finite and above 0 (0, infinity, NaN or a
    bool is no measurement)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < math.inf


def t95_half(values: Sequence[float]) -> float:
    """The half-width of the 95% t-interval of the mean of ``values`` (at least 2)."""
    return t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def rounds_interval(base: Sequence[float], cand: Sequence[float]) -> dict:
    """The ratio over interleaved rounds (round i: one baseline and one candidate engine process) with its 95%
    t-interval: the geometric mean of the round ratios cand_i / base_i, and exp(mean +- t * sd / sqrt(n)) of their
    logs. Unlike a percentile bootstrap (which, with 3 rounds, can only span the observed ratios), it widens with few
    rounds as it should: its coverage is exact when a process's speed varies log-normally around its side's.

    Returns {"ratio", "lo", "hi", "n", "paired": True, "method": "t over rounds"} (+ "note" when n < 2)."""
    _check(base, cand, True)
    logs = [math.log(_div(float(c), float(b))) for b, c in zip(base, cand)]
    n = len(logs)
    mean = statistics.fmean(logs)
    out = {"ratio": math.exp(mean), "lo": math.exp(mean), "hi": math.exp(mean), "n": n, "paired": True,
           "conf": 0.95, "method": "t over rounds"}
    if n < 2:
        out["note"] = NO_INTERVAL
        return out
    half = t95_half(logs)
    out["lo"], out["hi"] = math.exp(mean - half), math.exp(mean + half)
    return out


def rounds_delta_interval(base_b: Sequence[float], base_c: Sequence[float], head_b: Sequence[float],
                          head_c: Sequence[float], shared: bool = False) -> dict:
    """HEAD's round ratio over BASE's (two independent interleaved runs) with a 95% t-interval on the difference of
    their mean log round ratios (Welch's standard error, the smaller run's degrees of freedom: conservative).

    Returns {"ratio", "lo", "hi", "n", "paired_base": True, "paired_head": True, "method": "t over rounds"}.

    ``shared``: both runs' baselines are the same engine processes (`fk run --with-aa`: its A/A as BASE, its
    candidate as HEAD); they cancel round by round: HEAD's candidate over BASE's, paired by round (the same point, a
    t-interval on their round ratios)."""
    if shared and len(base_c) == len(head_c):
        return dict(rounds_interval(base_c, head_c), paired_base=True, paired_head=True,
                    method="t over rounds (shared baselines: HEAD's candidate over BASE's, round by round)")
    b, h = rounds_interval(base_b, base_c), rounds_interval(head_b, head_c)
    n = min(b["n"], h["n"])
    point = _div(h["ratio"], b["ratio"])
    out = {"ratio": point, "lo": point, "hi": point, "n": n, "paired_base": True, "paired_head": True, "conf": 0.95,
           "method": "t over rounds"}
    if n < 2:
        out["note"] = NO_INTERVAL
        return out
    var = [statistics.variance([math.log(_div(float(c), float(x))) for x, c in zip(bs, cs)]) / len(bs)
           for bs, cs in ((base_b, base_c), (head_b, head_c))]
    half = t95(n - 1) * math.sqrt(sum(var))
    out["lo"], out["hi"] = point * math.exp(-half), point * math.exp(half)
    return out
