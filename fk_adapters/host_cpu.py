"""How busy the host's CPUs were during a timed call, every process counted (ours too): a slow run on a GPU can be a
host that other work kept busy (session 43: two fk runs side by side, one compiling while the other timed)."""
from __future__ import annotations

import statistics

BUSY_JUMP = 0.10  # a timed call this much busier (share of all CPUs) than the median of a scenario's calls is noted


def jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU time of all the host's CPUs so far, from Linux's /proc/stat; None where there is none."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(v) < 5:
        return None
    return sum(v) - v[3] - v[4], sum(v)  # idle and iowait are not busy


def busy_since(before: tuple[int, int] | None) -> float | None:
    """The share of all CPUs busy since ``before`` (a ``jiffies()``), None where unknown or too short to tell."""
    after = jiffies()
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round((after[0] - before[0]) / (after[1] - before[1]), 3)


def findings(runs: dict) -> list[str]:
    """Over a scenario's engine runs ({side: [round 1, ...]}): the timed calls the host's CPUs were notably busier
    during than the scenario's median call, with the median (nothing when none stands out)."""
    calls = [(rnd, side, e) for side, results in runs.items() for rnd, res in enumerate(results, 1)
             for e in ((res.get("perf") or {}).get("timeline") or []) if e.get("host_busy") is not None]
    if len(calls) < 2:
        return []
    mid = statistics.median(e["host_busy"] for _, _, e in calls)
    busy = [(e["host_busy"], rnd, side, e["workload"]) for rnd, side, e in calls if e["host_busy"] - mid >= BUSY_JUMP]
    if not busy:
        return []
    several = max(len(r) for r in runs.values()) > 1
    where = ", ".join(f"{f'round {rnd} ' if several else ''}{side} {w} {b:.0%}"
                      for b, rnd, side, w in sorted(busy, reverse=True))
    return [f"the host's CPUs were busier during some timed runs than the median {mid:.0%} of this scenario's "
            f"(other work on the machine can slow a run): {where}"]


def _calls(row: dict, workload: str):
    """(side, round, host_busy) of each timed call of ``workload`` ("throughput balanced") in a results row."""
    rounds = (row.get("rounds") or {}).get("runs")
    per_side = dict(zip(("baseline", "candidate"), rounds)) if rounds else {
        side: [row.get(side) or {}] for side in ("baseline", "candidate")}
    for side, runs in per_side.items():
        for rnd, run in enumerate(runs, 1):
            for e in (run or {}).get("timeline") or []:
                if e.get("workload") == workload and e.get("host_busy") is not None:
                    yield side, rnd, e["host_busy"]


def during(row: dict, side: str, rnd: int, workload: str) -> str:
    """How busy the host was during one engine process's timed runs of ``workload`` against the others' runs of it
    ("" where the results hold no such record)."""
    calls = list(_calls(row, workload))
    mine = [b for s, r, b in calls if (s, r) == (side, rnd)]
    others = [b for s, r, b in calls if (s, r) != (side, rnd)]
    if not mine or not others:
        return ""
    return f"; the host's CPUs {max(mine):.0%} busy during it, {statistics.median(others):.0%} in the other runs of it"
