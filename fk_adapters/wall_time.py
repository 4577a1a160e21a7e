"""Where the wall time of a run went: each engine process's phases (its ``[fk]`` progress lines, timed by the runner
as they arrive), in a few kinds; what the engine's own log says its start spent on weights, torch.compile and CUDA
graphs; per scenario, beside the seeded weights, summed over every process it started."""
from __future__ import annotations

import re

IMPORT, START = "python + engine import", "engine start"
# Of a scenario's span (weights to verdict), what no engine process holds: waiting for the GPU lock, and fk's own work
# between processes (judging, profiles read, result files, a process's exit).
WAIT, OUTSIDE = "waiting for the GPU", "fk outside processes"
REFERENCE = "float32 reference"  # its engine process whole: correctness only, its own start
KINDS = (IMPORT, START, "correctness", "timed runs", "profile")
# What vLLM logs about its start (seen in vLLM 0.26's logs under reports/gpu): parts of "engine start".
START_PARTS = {"loading weights": re.compile(r"Loading weights took ([\d.]+) seconds"),
               "torch.compile": re.compile(r"torch\.compile took ([\d.]+) s in total"),
               "CUDA graphs": re.compile(r"Graph capturing finished in ([\d.]+) secs")}
# vLLM's warning when it must spawn (a fresh interpreter that imports vLLM again) instead of forking: its reason. Any
# vLLM process may log it (a forked engine core that initialised CUDA does), so only the driver's record
# (``engine_core``) says the engine core itself was spawned
SPAWNED = re.compile(r"Overriding VLLM_WORKER_MULTIPROC_METHOD to 'spawn'.*?Reasons: ([^\n]+)")


def kind(phase: str) -> str | None:
    """The kind of a phase after the first (the engine's start); None for a note, which continues the kind before."""
    if phase.startswith("correctness"):
        return "correctness"
    if phase.startswith(("throughput", "latency")):
        return "timed runs"
    if phase.startswith("profil"):
        return "profile"
    return None


def process(marks: list[list], wall_s: float, log_text: str = "", engine_core: str | None = None) -> dict:
    """Seconds per kind in one engine process. ``marks``: [phase, seconds since the process started] of its progress
    lines; before the first, the import; the first is its start; each lasts until the next of another kind.
    ``engine_core``: "spawned" or "forked", as the driver recorded how its engine core started (vLLM)."""
    out = dict.fromkeys(KINDS, 0.0)
    current, since = IMPORT, 0.0
    for n, (phase, t) in enumerate(marks):
        new = START if n == 0 else kind(phase)
        if new and new != current:
            out[current] += t - since
            current, since = new, t
    out[current] += max(wall_s - since, 0.0)
    out = {k: round(v, 1) for k, v in out.items() if v}
    parts = {name: sum(float(x) for x in pattern.findall(log_text)) for name, pattern in START_PARTS.items()}
    if any(parts.values()):
        out["start_parts"] = {k: round(v, 1) for k, v in parts.items() if v}
    if engine_core == "spawned":
        why = SPAWNED.search(log_text)
        out["spawned"] = why.group(1).strip() if why else "vLLM's start method was spawn"
    out["total"] = round(wall_s, 1)
    return out


def start_findings(runs: dict) -> list[str]:
    """A note where vLLM spawned the engine core in one side's processes and not in the other's, and one where fk's
    install initialised CUDA in a forked engine core: the two sides did not start alike (``runs``: {side: [each round's
    result]})."""
    spawned = {side: [r["phases"]["spawned"] for r in rs if (r.get("phases") or {}).get("spawned")]
               for side, rs in runs.items()}
    cuda = sum(any(rec.get("cuda_initialized_by_install") for rec in r.get("loads") or []) for r in runs["candidate"])
    out = [f"fk's install initialised CUDA in the forked engine core of {cuda} of {len(runs['candidate'])} candidate "
           "process(es): vLLM spawns that core's workers (tensor parallelism) where stock forks them"] if cuda else []
    if all(spawned.values()) or not any(spawned.values()):
        return out
    side = next(s for s, why in spawned.items() if why)
    return [f"vLLM spawned the engine core of {len(spawned[side])} of {len(runs[side])} {side} process(es) (its "
            f"reason: {spawned[side][0]}) and forked the other side's: the two sides' engines did not start alike "
            "(a spawned core imports vLLM again, about 25 s, and runs in a fresh interpreter)"] + out


def _ran_here(runs: list[dict]) -> list[dict]:
    return [r for r in runs if r.get("phases") and not r.get("reused_from")]


def _sides(row: dict) -> list[dict]:
    """The processes of both sides, every round, and a --with-aa run's second stock process of each round."""
    rounds = (row.get("rounds") or {}).get("runs")
    runs = [r for side in rounds for r in side] if rounds else [row.get("baseline") or {}, row.get("candidate") or {}]
    partner = ((row.get("aa") or {}).get("rounds") or {}).get("runs") or [[], []]
    return _ran_here(runs + partner[1])


def scenario(row: dict) -> dict | None:
    """A scenario's wall time: the seeded weights, per kind the sum over the two sides' engine processes it started,
    the float32 reference's processes whole (``REFERENCE``: with an engine's float32 run that failed before HF
    transformers made it; ``reference_reused`` where it came from elsewhere); reused runs cost nothing here. None for
    a row from before fk timed phases."""
    reference = row.get("reference") or {}
    sides, ref = _sides(row), _ran_here([reference, reference.get("failed_first") or {}])
    procs = sides + ref
    if not procs and "weights_s" not in row:
        return None
    out = {"weights": row.get("weights_s", 0.0), "processes": len(procs)}
    for k in KINDS:
        out[k] = round(sum(p["phases"].get(k, 0.0) for p in sides), 1)
    out[REFERENCE] = round(sum(p["phases"].get("total", 0.0) for p in ref), 1)
    if reference.get("reused_from"):
        out["reference_reused"] = True
    out["total"] = round(sum(p["phases"].get("total", 0.0) for p in procs), 1)
    out[WAIT] = round(sum(p.get("gpu_wait_s", 0.0) for p in procs), 1)
    outside = row.get("span_s", 0.0) - out["weights"] - out["total"] - out[WAIT]
    if "span_s" in row and outside >= 0:  # < 0: processes ran side by side (--gpus), their sum is no span
        out[OUTSIDE] = round(outside, 1)
    for p in procs:
        for k, v in (p["phases"].get("start_parts") or {}).items():
            out.setdefault("start_parts", {})[k] = round(out.get("start_parts", {}).get(k, 0.0) + v, 1)
    return out


def _reference_cell(s: dict) -> str:
    return "reused" if s.get("reference_reused") else f"{s[REFERENCE]:.0f}" if s[REFERENCE] else "-"


def markdown(rows: list[dict], run_wall_s: float | None) -> list[str]:
    """The table of every scenario's wall time, and the run's total."""
    from tabulate import tabulate

    split = [(r["scenario"], s) for r in rows if (s := scenario(r))]
    if not split:
        return []
    table = [[name, s["processes"], f"{s['weights']:.0f}", *(f"{s[k]:.0f}" for k in KINDS), _reference_cell(s),
              f"{s['total']:.0f}",
              f"{s.get(WAIT, 0):.0f}", f"{s[OUTSIDE]:.0f}" if OUTSIDE in s else "-",
              ", ".join(f"{k} {v:.0f}" for k, v in (s.get("start_parts") or {}).items()) or "-"]
             for name, s in split]
    total = f" The whole run took {run_wall_s / 60:.1f} min." if run_wall_s else ""
    spans = [r["span_s"] for r in rows if "span_s" in r]
    if run_wall_s and len(spans) == len(rows) and 0 <= run_wall_s - sum(spans):  # the scenarios one after another
        total += f" {run_wall_s - sum(spans):.0f} s of it outside the scenarios (fk's set-up, the report and plots " \
                 "written after each)."
    return ["", "## Where the wall time went", "",
            "Seconds per scenario, summed over the engine processes it started (both sides, every round; runs reused "
            "from another folder or fk's reference store cost nothing here): each side's process's phases as its "
            "progress lines arrived, the float32 reference's process whole, and what the engine logged of its start "
            "(every process); beside them, the waits for fk's GPU lock and "
            f"the rest of the scenario's span that no engine process held (fk judging, reading profiles, writing "
            f"files; '-' where processes ran side by side).{total}", "",
            tabulate(table, headers=["scenario", "processes", "seeded weights", *KINDS, REFERENCE, "processes' total",
                                     WAIT, OUTSIDE, "of the start (engine log)"], tablefmt="github")]


def duration(s: float) -> str:
    """'4m05s', or '12s' under a minute."""
    m, sec = divmod(int(round(s)), 60)
    return f"{m}m{sec:02d}s" if m else f"{sec}s"
