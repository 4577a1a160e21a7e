"""How fast each of the host's CPUs runs the same pure-Python work, pass after pass (``fk_adapters.cpu_speed``, as
``fk doctor`` reports it), then in fresh unpinned processes, as the engine's are started.

Session 57 saw an engine process's host work (vLLM's scheduler, its runner's input preparation) run 0.6x to 1.3x as
long as the other side's, uniformly over every host range, in a VM of 16 vCPUs. This tells whether the vCPUs differ
(and stay different), which binding both sides to the same CPUs takes out of a comparison, or whether the speed
wanders with time. Usage: ``python reports/gpu/vcpu_speed.py [passes] [--bind N]``; ``--bind N`` ends with the N
CPUs fastest in this survey as ``FK_BIND_CPUS=...``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fk_adapters import cpu_speed  # noqa: E402  (the checkout's, wherever this runs)


def cpu_now() -> int:
    """The CPU this thread last ran on (field 39 of /proc/thread-self/stat), -1 where unknown."""
    try:
        with open("/proc/thread-self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


def one_process() -> None:
    """In a fresh, unpinned process: the work's median over 20 runs and the CPUs it ran on, as one line."""
    cpu_speed.work()
    runs, cpus = [], set()
    for _ in range(20):
        runs.append(cpu_speed.work() * 1e3)
        cpus.add(cpu_now())
    print(f"{statistics.median(runs):.2f} {min(runs):.2f} {max(runs):.2f} {','.join(map(str, sorted(cpus)))}")


def main(passes: int, bind: int = 0) -> None:
    s = cpu_speed.survey(passes)
    best = min(min(v) for v in s["ms"].values())
    print(f"{len(s['ms'])} CPUs, {passes} passes: ms for the same work on each (best of 3 a pass), x the fastest")
    for c, v in s["ms"].items():
        print(f"cpu {c:3}: " + " ".join(f"{x:7.2f}" for x in v) + f"   x{statistics.median(v) / best:5.2f}")
    print(cpu_speed.words(s))
    print("8 fresh unpinned processes, one after another: ms (median, min, max of 20) and the CPUs each ran on")
    for i in range(8):
        out = subprocess.run([sys.executable, __file__, "--one"], capture_output=True, text=True).stdout.strip()
        print(f"process {i}: {out}")
    if bind:  # from this survey, not another: a wandering host names other CPUs each time (session 58)
        print("FK_BIND_CPUS=" + ",".join(map(str, cpu_speed.fastest(s, bind))))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("passes", type=int, nargs="?", default=3)
    ap.add_argument("--bind", type=int, default=0, metavar="N")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a fresh process's line (one_process)
    args = ap.parse_args()
    if args.one:
        one_process()
    else:
        main(args.passes, args.bind)
