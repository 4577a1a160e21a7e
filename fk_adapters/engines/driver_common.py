"""What every engine driver shares: the job/result file plumbing, progress lines, timed workloads.

A driver supplies ``run(job) -> result`` and, for performance, ``timed(prompts, output_len)``
returning (seconds, input tokens, output tokens) for one batch served to completion.
"""
from __future__ import annotations

import json
import sys
import traceback


def phase(name: str) -> None:
    """A progress line; the runner echoes lines starting with [fk]."""
    print(f"[fk] {name}", flush=True)


def measure(perf: dict, timed) -> dict:
    """Throughput and latency rows over repeats, after warming up on the very same workload."""
    out: dict = {"throughput": {}, "latency": {}}
    reps, warm = perf.get("repeats", 3), perf.get("warmup", 1)
    for name, w in perf.get("throughput", {}).items():
        for _ in range(warm):  # the full workload: every shape the timed repeats meet is compiled first
            timed(w["prompts"], w["output_len"])
        rows = []
        for i in range(reps):
            phase(f"throughput {name}: repeat {i + 1}/{reps}")
            dt, n_in, n_out = timed(w["prompts"], w["output_len"])
            rows.append({"elapsed_s": dt, "tokens_per_s": (n_in + n_out) / dt, "output_tokens_per_s": n_out / dt,
                         "input_tokens": n_in, "output_tokens": n_out})
        out["throughput"][name] = rows
    for name, w in perf.get("latency", {}).items():
        for _ in range(warm):
            timed(w["prompts"], w["output_len"])
        phase(f"latency {name}: {reps} repeats")
        out["latency"][name] = [{"latency_s": timed(w["prompts"], w["output_len"])[0]} for _ in range(reps)]
    return out


def main(run, argv=None) -> int:
    """``python -m <driver> JOB.json RESULT.json``: run the job, always write a result."""
    job_path, result_path = sys.argv[1:] if argv is None else argv
    with open(job_path) as f:
        job = json.load(f)
    try:
        res = run(job)
    except Exception as exc:
        res = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        print(res["traceback"], flush=True)  # into the run's log, where the report points
    with open(result_path, "w") as f:
        json.dump(res, f)
    return 0 if res["status"] == "ok" else 1
