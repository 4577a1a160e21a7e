"""How fast each of the host's CPUs runs the same pure-Python work, pass after pass.

Session 57 saw an engine process's host work (vLLM's scheduler, its runner's input preparation) run 0.6x to 1.3x as
long as the other side's, uniformly over every host range, in a VM of 16 vCPUs. This tells whether the vCPUs differ
(and stay different), which pinning both sides to the same CPUs would take out of a comparison, or whether the speed
wanders with time; then the same work in fresh unpinned processes, as the engine's are started. Usage:
``python reports/gpu/vcpu_speed.py [passes]``; ``--fastest N`` prints the N fastest CPUs as a list for FK_BIND_CPUS.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def work() -> float:
    """Seconds for a fixed mix of what a scheduler does in Python: dicts, lists, attribute lookups, small objects."""
    t0 = time.perf_counter()
    d: dict[int, list[int]] = {}
    for i in range(60_000):
        d.setdefault(i % 997, []).append(i)
        if len(d[i % 997]) > 8:
            d[i % 997] = d[i % 997][4:]
    sorted(d.items(), key=lambda kv: sum(kv[1]))
    return time.perf_counter() - t0


def steal_ticks() -> dict[int, int]:
    """Steal time (ticks) per CPU from /proc/stat: time the hypervisor ran something else on that vCPU."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts[0].startswith("cpu") and parts[0] != "cpu" and len(parts) > 8:
                out[int(parts[0][3:])] = int(parts[8])
    return out


def cpu_now() -> int:
    """The CPU this thread last ran on (field 39 of /proc/self/stat), -1 where unknown."""
    try:
        with open("/proc/thread-self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


def one_process() -> None:
    """In a fresh, unpinned process: the work's median over 20 runs and the CPUs it ran on, as one line."""
    work()
    runs, cpus = [], set()
    for _ in range(20):
        runs.append(work() * 1e3)
        cpus.add(cpu_now())
    print(f"{statistics.median(runs):.2f} {min(runs):.2f} {max(runs):.2f} {','.join(map(str, sorted(cpus)))}")


def fresh_processes(n: int = 8) -> None:
    """The same work in ``n`` fresh unpinned processes one after another: whether a process's speed is its own (the
    engine processes' were) and follows the CPU the scheduler put it on."""
    print(f"{n} fresh unpinned processes, one after another: ms (median, min, max of 20) and the CPUs each ran on")
    for i in range(n):
        out = subprocess.run([sys.executable, __file__, "--one"], capture_output=True, text=True).stdout.strip()
        print(f"process {i}: {out}")


def main(passes: int = 3) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    table = {c: [] for c in cpus}
    steal0 = steal_ticks()
    for _ in range(passes):
        for c in cpus:
            os.sched_setaffinity(0, {c})
            work()
            table[c].append(statistics.median(work() for _ in range(5)) * 1e3)
    os.sched_setaffinity(0, set(cpus))
    steal = {c: steal_ticks().get(c, 0) - steal0.get(c, 0) for c in cpus}
    best = min(min(v) for v in table.values())
    print(f"{len(cpus)} CPUs, {passes} passes; ms for the same work (median of 5), and x the fastest reading")
    for c in cpus:
        ms = " ".join(f"{v:7.2f}" for v in table[c])
        print(f"cpu {c:3}: {ms}   x{statistics.median(table[c]) / best:5.2f}   steal ticks {steal[c]}")
    meds = [statistics.median(v) for v in table.values()]
    print(f"slowest / fastest CPU (medians): {max(meds) / min(meds):.2f}")


def fastest(n: int) -> str:
    """The ``n`` CPUs that ran the work fastest over 3 pinned passes, as a CPU list for FK_BIND_CPUS ("0,3,5,9")."""
    cpus = sorted(os.sched_getaffinity(0))
    table = {c: [] for c in cpus}
    for _ in range(3):
        for c in cpus:
            os.sched_setaffinity(0, {c})
            table[c].append(min(work() for _ in range(4)))
    os.sched_setaffinity(0, set(cpus))
    return ",".join(map(str, sorted(sorted(cpus, key=lambda c: statistics.median(table[c]))[:n])))


if __name__ == "__main__":
    if sys.argv[1:] == ["--one"]:
        one_process()
    elif sys.argv[1:2] == ["--fastest"]:
        print(fastest(int(sys.argv[2])))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
        fresh_processes()
