"""How busy the host's CPUs were during a timed call, every process counted (ours too): a slow run on a GPU can be a
host that other work kept busy (session 43: two fk runs side by side, one compiling while the other timed). In a VM,
also the share of its CPUs' time the hypervisor gave to something else (steal): session 57's engine processes on one
H100 VM ran their host work 0.6x-1.3x as fast as each other's, which nothing on the VM itself explained."""
from __future__ import annotations

import statistics

from fk_adapters import engine_runs

BUSY_JUMP = 0.10  # a timed call this much busier (share of all CPUs) than the median of a scenario's calls is noted
STEAL_NOTE = 0.01  # a timed call whose CPUs' time the hypervisor took this share of (or more) is noted


def _cpu_times() -> list[int] | None:
    """All the host's CPUs' time so far (user, nice, system, idle, iowait, irq, softirq, steal), from Linux's
    /proc/stat; None where there is none."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return v if len(v) >= 5 else None


def jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU time of all the host's CPUs so far; None where unknown."""
    v = _cpu_times()
    return None if v is None else (sum(v) - v[3] - v[4], sum(v))  # idle and iowait are not busy


def stolen() -> tuple[int, int] | None:
    """(steal, total) CPU time of all the host's CPUs so far (steal: a VM's CPUs' time its hypervisor ran something
    else); None where unknown."""
    v = _cpu_times()
    return (v[7], sum(v)) if v is not None and len(v) == 8 else None


def steal_since(before: tuple[int, int] | None) -> float | None:
    """The share of all CPUs' time stolen since ``before`` (a ``stolen()``), None where unknown or too short."""
    return _share(before, stolen())


def busy_since(before: tuple[int, int] | None) -> float | None:
    """The share of all CPUs busy since ``before`` (a ``jiffies()``), None where unknown or too short to tell."""
    return _share(before, jiffies())


def _share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round((after[0] - before[0]) / (after[1] - before[1]), 3)


def _timed(runs: dict):
    """(name, side, round, timeline entry) of every timed call with a known host load, over engine runs
    ({side: [round 1, ...]}) as results (``perf.timeline``) or their summaries in results.json (``timeline``)."""
    for name, side, rnd, res in engine_runs.each(runs):
        for e in res.get("timeline") or (res.get("perf") or {}).get("timeline") or []:
            if e.get("host_busy") is not None:
                yield name, side, rnd, e


def findings(runs: dict) -> list[str]:
    """Over a scenario's engine runs ({side: [round 1, ...]}): the timed calls the host's CPUs were notably busier
    during than the scenario's median call, with the median (nothing when none stands out)."""
    calls = list(_timed(runs))
    if len(calls) < 2:
        return []
    mid = statistics.median(e["host_busy"] for *_, e in calls)
    busy = _each(calls, lambda e: e["host_busy"] - mid >= BUSY_JUMP, "host_busy")
    steal = _each(calls, lambda e: (e.get("host_steal") or 0.0) >= STEAL_NOTE, "host_steal")
    out = [f"the host's CPUs were busier during some timed runs than the median {mid:.0%} of this scenario's "
           f"(other work on the machine can slow a run): {_where(busy, '.0%')}"] if busy else []
    return out + ([f"the hypervisor took part of the host's CPU time (steal) during some timed runs (another VM's "
                   f"work can slow a run): {_where(steal, '.1%')}"] if steal else [])


def _each(calls, stands_out, key: str) -> dict:
    """{(process, workload): ``key`` of each of its timed calls that ``stands_out``}."""
    out: dict = {}
    for name, _, _, e in calls:
        if stands_out(e):
            out.setdefault((name, e["workload"]), []).append(e[key])
    return out


def _where(found: dict, fmt: str) -> str:
    return ", ".join(f"{name} {w} {max(b):{fmt}}" + (f" ({len(b)} repeats)" if len(b) > 1 else "")
                     for (name, w), b in sorted(found.items(), key=lambda kv: -max(kv[1])))


def during(row: dict, side: str, rnd: int, workload: str) -> str:
    """How busy the host was during one engine process's timed runs of ``workload`` ("throughput balanced") against
    the others' runs of it, from a results row ("" where it holds no such record)."""
    rounds = (row.get("rounds") or {}).get("runs")
    per_side = dict(zip(("baseline", "candidate"), rounds)) if rounds else {
        s: [row.get(s) or {}] for s in ("baseline", "candidate")}
    calls = [(s, r, e["host_busy"]) for _, s, r, e in _timed(per_side) if e.get("workload") == workload]
    mine = [b for s, r, b in calls if (s, r) == (side, rnd)]
    others = [b for s, r, b in calls if (s, r) != (side, rnd)]
    if not mine or not others:
        return ""
    steal = max([e.get("host_steal") or 0.0 for _, s, r, e in _timed(per_side)
                 if (s, r) == (side, rnd) and e.get("workload") == workload])
    stole = f", the hypervisor took {steal:.1%} of their time (steal)" if steal >= STEAL_NOTE else ""
    return (f"; the host's CPUs {max(mine):.0%} busy during it{stole}, {statistics.median(others):.0%} in the other "
            "runs of it")
