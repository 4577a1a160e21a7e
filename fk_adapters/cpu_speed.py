"""Whether the host's CPUs run alike: the same pure-Python work timed on each CPU in turn, pass after pass.

An engine's host work (its scheduler, its runner's input preparation, the launches) runs on whichever CPU the kernel
puts its threads on. Where the CPUs differ (a VM whose vCPUs share cores with another's, say), two engine processes
of one comparison run it at different speeds: session 57 saw one H100 VM's processes 0.6x-1.3x as fast as each
other's (``time_split.host_pace``). Session 58's survey of that VM found no CPU steadily slower, but single passes
at up to twice their CPU's best, now on one CPU, then on another: a speed that wanders, which binding cannot take
out. ``fk doctor`` reports the survey; ``FK_BIND_CPUS`` binds both sides to the same CPUs (``cpu_binding``).
"""
from __future__ import annotations

import os
import statistics
import time

from fk_adapters import host_cpu

ALIKE = 1.10  # the slowest CPU's best time over the fastest's, at most, for the CPUs to count as running alike


def work() -> float:
    """Seconds for a fixed mix of what a scheduler does in Python: dicts, lists, small objects (5-15 ms)."""
    t0 = time.perf_counter()
    d: dict[int, list[int]] = {}
    for i in range(60_000):
        d.setdefault(i % 997, []).append(i)
        if len(d[i % 997]) > 8:
            d[i % 997] = d[i % 997][4:]
    sorted(d.items(), key=lambda kv: sum(kv[1]))
    return time.perf_counter() - t0


def survey(passes: int = 3, reps: int = 3) -> dict:
    """{"ms": {cpu: [the work's best ms of ``reps`` on it, a pass]}, "steal": the share of the CPUs' time the
    hypervisor took meanwhile (None where unknown)}: each CPU this process may use, in turn, ``passes`` times."""
    cpus = sorted(os.sched_getaffinity(0))
    table: dict[int, list[float]] = {c: [] for c in cpus}
    stolen = host_cpu.stolen()
    try:
        for _ in range(passes):
            for c in cpus:
                os.sched_setaffinity(0, {c})
                table[c].append(round(min(work() for _ in range(reps)) * 1e3, 3))
    finally:
        os.sched_setaffinity(0, set(cpus))
    return {"ms": table, "steal": host_cpu.steal_since(stolen)}


def _best(s: dict) -> dict:
    return {c: min(v) for c, v in s["ms"].items()}


def spread(s: dict) -> float:
    """The slowest CPU's best time over the fastest's: a difference that stays, which binding takes out."""
    best = _best(s).values()
    return max(best) / min(best)


def wander(s: dict) -> dict:
    """The passes that took more than ``ALIKE`` x their own CPU's best (another tenant on the core, say): a speed
    that changes with time, which no binding takes out. {"passes", "of", "cpus", "worst": x its CPU's best}."""
    best = _best(s)
    slow = [(c, x / best[c]) for c, v in s["ms"].items() for x in v if x > ALIKE * best[c]]
    return {"passes": len(slow), "of": sum(len(v) for v in s["ms"].values()), "cpus": len({c for c, _ in slow}),
            "worst": max((x for _, x in slow), default=1.0)}


def fastest(s: dict, n: int) -> list[int]:
    """The ``n`` CPUs of the survey with the lowest median time, in CPU order (keys read back from JSON too)."""
    meds = {c: statistics.median(v) for c, v in s["ms"].items()}
    return sorted(int(c) for c in sorted(meds, key=meds.get)[:n])


def words(s: dict) -> str:
    """The survey in a line: whether the CPUs differ, whether their speed wanders, and what to do."""
    best, x, w = _best(s), spread(s), wander(s)
    slow = max(best, key=best.get)
    steal = "" if s.get("steal") is None else f", steal {s['steal']:.1%}"
    line = (f"host CPUs: {len(best)}, the same Python work at best {min(best.values()):.1f}-{best[slow]:.1f} ms a CPU "
            f"(slowest CPU {slow}, x{x:.2f} the fastest){steal}")
    if x <= ALIKE:
        line += ": alike"
    else:
        half = max(1, len(best) // 2)
        line += (f": NOT alike: two engine processes of a comparison may run their host work at different speeds; "
                 f"bind both sides to the same CPUs, e.g. FK_BIND_CPUS={','.join(map(str, fastest(s, half)))}")
    if w["passes"]:
        line += (f"; the speed wanders: {w['passes']} of {w['of']} passes on {w['cpus']} CPU(s) took up to "
                 f"x{w['worst']:.2f} their CPU's best: no binding takes that out; interleaved rounds with an A/A "
                 f"(--interleave, --with-aa) measure it")
    return line
