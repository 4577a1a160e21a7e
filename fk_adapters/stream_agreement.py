"""How far one side's own engine processes agree on their greedy streams, over interleaved rounds: a reading for the
streams the report compares (session 43: both lanes' first stock processes parted from every later one, stock or
passthrough, on 15 of 32 streams, so a passthrough's parted streams there said nothing about its numerics)."""
from __future__ import annotations


def _identical(a: list, b: list) -> int:
    return sum(x == y for x, y in zip(a, b))


def findings(runs: dict) -> list[str]:
    """Over a scenario's engine runs ({side: [round 1, ...]}) where every process generated tokens: one line giving,
    per side, how many streams of rounds 2.. are identical to that side's round 1, when any is not."""
    parts, total = [], 0
    for side, results in runs.items():
        streams = [r.get("tokens") for r in results]
        if len(streams) < 2 or not all(streams):
            return []
        total = len(streams[0])
        counts = [_identical(streams[0], s) for s in streams[1:]]
        span = f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
        parts.append((side, span, min(counts) < total))
    if not any(differs for _, _, differs in parts):
        return []
    return ["greedy streams identical to the same side's round 1, over the later rounds' engine processes: "
            + ", ".join(f"{side} {span} of {total}" for side, span, _ in parts)
            + " (how far the engine's own processes agree: a reading for the baseline / candidate streams)"]
