"""A scenario's engine processes as the runner holds them, ``{side: [round 1, round 2, ...]}``."""
from __future__ import annotations


def each(runs: dict):
    """(name, side, round, result) of every process, named as the reports name it: "round 2 baseline", or "baseline"
    where each side ran once."""
    several = max((len(r) for r in runs.values()), default=0) > 1
    for side, results in runs.items():
        for rnd, res in enumerate(results, 1):
            yield (f"round {rnd} {side}" if several else side), side, rnd, res or {}
