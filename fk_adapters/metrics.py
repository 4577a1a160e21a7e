"""Correctness and performance comparisons between a baseline run and a candidate run."""
from __future__ import annotations

import math
import statistics

# Teacher-forced |Δ logprob| limits per dtype (max over positions, mean over positions). A kernel
# within the dtype's rounding stays below them; the deliberately wrong plugin lands above.
THRESHOLDS = {
    "float32": {"max_abs": 2e-3, "mean_abs": 2e-4},
    "float16": {"max_abs": 0.25, "mean_abs": 0.02},
    "bfloat16": {"max_abs": 0.5, "mean_abs": 0.04},
}
# Greedy streams may part at a near tie (seen even baseline vs. baseline under bf16 batching).
# A parting is accepted only when each side's token is among the other's TOP_K most likely there;
# after it the streams are no longer comparable.
TOP_K = 5


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token, or None when identical (length differences count)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def near_tie(i: int, a: list[int], b: list[int], top_a: list[list[int]], top_b: list[list[int]]) -> bool:
    """True if the streams part at step i between tokens each side ranks in its top k."""
    if i >= min(len(a), len(b), len(top_a), len(top_b)):
        return False
    return a[i] in top_b[i][:TOP_K] and b[i] in top_a[i][:TOP_K]


def compare_tokens(base: list[list[int]], cand: list[list[int]], base_top=None, cand_top=None) -> dict:
    divs = [first_divergence(a, b) for a, b in zip(base, cand)]
    same = sum(d is None for d in divs)
    base_top = base_top or [[] for _ in base]
    cand_top = cand_top or [[] for _ in cand]
    unexplained = [r for r, d in enumerate(divs)
                   if d is not None and not near_tie(d, base[r], cand[r], base_top[r], cand_top[r])]
    return {"requests": len(divs), "identical": same, "match_fraction": same / len(divs) if divs else 0.0,
            "near_ties": len(divs) - same - len(unexplained), "unexplained": unexplained,
            "first_divergence": divs}


def compare_logprobs(base: list[list], cand: list[list]) -> dict:
    diffs = [abs(x - y) for ra, rb in zip(base, cand) for x, y in zip(ra, rb) if x is not None and y is not None]
    missing = sum(1 for ra, rb in zip(base, cand) for x, y in zip(ra, rb) if x is None or y is None)
    if not diffs:
        return {"positions": 0, "missing": missing, "max_abs": math.inf, "mean_abs": math.inf}
    return {"positions": len(diffs), "missing": missing, "max_abs": max(diffs), "mean_abs": sum(diffs) / len(diffs)}


def correctness(base: dict, cand: dict, dtype: str) -> dict:
    """Judge the candidate's tokens and teacher-forced logprobs against the baseline's."""
    limits = THRESHOLDS[dtype]
    tokens = compare_tokens(base["tokens"], cand["tokens"], base.get("token_top_ids"), cand.get("token_top_ids"))
    teacher = compare_logprobs(base["teacher_logprobs"], cand["teacher_logprobs"])
    failures = []
    if tokens["unexplained"]:
        failures.append(f"greedy tokens part outside a top-{TOP_K} near tie in {len(tokens['unexplained'])}/"
                        f"{tokens['requests']} requests (first at steps "
                        f"{sorted(tokens['first_divergence'][r] for r in tokens['unexplained'])[:8]})")
    if teacher["positions"] == 0:
        failures.append("no teacher-forced logprobs to compare")
    for k in ("max_abs", "mean_abs"):
        if not teacher[k] <= limits[k]:
            failures.append(f"teacher-forced {k.replace('_abs', '')} |Δlogprob| {teacher[k]:.3g} > {limits[k]:g}")
    return {"dtype": dtype, "thresholds": limits, "tokens": tokens, "teacher_forced": teacher,
            "passed": not failures, "failures": failures}


def spread(values: list[float]) -> dict:
    """Median with min, max and relative spread ((max - min) / median)."""
    if not values:
        return {"n": 0}
    med = statistics.median(values)
    return {"n": len(values), "median": med, "min": min(values), "max": max(values),
            "rel_spread": (max(values) - min(values)) / med if med else math.inf}


def ratio(base: list[float], cand: list[float]) -> dict:
    """Candidate/baseline ratio of medians, with the range of repeat-by-repeat ratios as its spread."""
    b, c = spread(base), spread(cand)
    if not b.get("n") or not c.get("n"):
        return {"ratio": None}
    pairs = [y / x for x, y in zip(base, cand) if x]
    return {"ratio": c["median"] / b["median"], "pair_min": min(pairs), "pair_max": max(pairs),
            "baseline": b, "candidate": c}


def performance(base: dict, cand: dict) -> dict:
    """Throughput ratios (higher is better) and latency ratios (lower is better) per workload."""
    out: dict = {"throughput": {}, "latency": {}}
    for name, rows in base.get("throughput", {}).items():
        crow = cand.get("throughput", {}).get(name, [])
        out["throughput"][name] = {
            key: ratio([r[key] for r in rows], [r[key] for r in crow]) for key in ("tokens_per_s", "output_tokens_per_s")}
    for name, rows in base.get("latency", {}).items():
        crow = cand.get("latency", {}).get(name, [])
        out["latency"][name] = {"latency_s": ratio([r["latency_s"] for r in rows], [r["latency_s"] for r in crow])}
    return out
