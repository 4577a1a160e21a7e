"""Whether a run's ratios account for the variation between engine processes, and the interval they may show.

Repeats inside one engine process share that process's state (its compiled graphs, memory layout, clocks at that
moment); the same job in a second process can differ by far more than the repeats do (seen: +-20% on an H100). So a
ratio gets an interval, a significance or a score only when its sides ran in several engine processes:
``MIN_ROUNDS`` or more interleaved rounds (A B, B A, ...: one value per process, paired by round), and its interval
is a t-interval over those rounds (``stats.rounds_interval``). A single pair
(one process per side, or a baseline reused from an earlier run) shows its ratio and the range of its repeats, never
a confidence interval, and its aggregate score is marked not significant.
"""
from __future__ import annotations

from fk_adapters import stats

MIN_ROUNDS = 3
SINGLE_PAIR = ("one engine process per side: the variation between engine processes is not measured, so no "
               f"interval or significance (run --interleave {MIN_ROUNDS} or more)")


def rounds(results) -> int:
    """How many interleaved rounds a run ran (``results``: its record, ``results.RunResults``, or its dict): those
    planned, or fewer where a scenario stopped early (``--time-budget``: its ``rounds.ran``)."""
    planned, rows = ((results.get("interleave"), results.get("scenarios") or []) if isinstance(results, dict)
                     else (results.interleave, results.scenarios))
    return min([int(planned or 1), *(r["rounds"]["ran"] for r in rows if "ran" in (r.get("rounds") or {}))])


def between_processes(results: dict) -> bool:
    """The run's ratios come from at least ``MIN_ROUNDS`` interleaved rounds of fresh engine processes."""
    return rounds(results) >= MIN_ROUNDS


def why_not(results: dict) -> str:
    """Why the run's ratios carry no interval ('' when they do)."""
    n = rounds(results)
    if n >= MIN_ROUNDS:
        return ""
    if n > 1:
        return f"{n} interleaved rounds: too few for an interval of the variation between engine processes " \
               f"(at least {MIN_ROUNDS})"
    return SINGLE_PAIR


def interval(r: dict, results: dict) -> dict | None:
    """The ratio's interval as a run may present it: ``stats.rounds_interval`` over its interleaved rounds when it
    ran enough of them, else None (``why_not`` says why)."""
    if not between_processes(results) or not r:
        return None
    b, c = (r.get(side) or {} for side in ("baseline", "candidate"))
    if not b.get("values") or not c.get("values") or len(b["values"]) != len(c["values"]):
        return None
    if len(b["values"]) < MIN_ROUNDS:  # a round that timed nothing on a side leaves too few pairs for this workload
        return None
    if not all(stats.positive_finite(v) for v in (*b["values"], *c["values"])):
        return None  # a round that read 0 (or no finite value) has no ratio to put in an interval
    return stats.rounds_interval(b["values"], c["values"])
