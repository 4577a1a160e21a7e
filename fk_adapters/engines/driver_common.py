"""What every engine driver shares: the job/result file plumbing, progress lines, timed workloads.

A driver supplies ``run(job) -> result`` (the engine drivers: ``skeleton.Driver.run``, the job protocol) and, for
performance, ``timed(prompts, output_len)`` returning (seconds, input tokens, output tokens) for one batch served to
completion.

A driver registers the result it builds with ``keep(res)``: from then on every ``phase()`` line (and every finished
timed workload) writes it to PARTIAL_FILE beside the result, so an engine process that dies (out of memory, killed
at its time limit) leaves behind the results of the phases it finished.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
import traceback

from fk_adapters import cpu_binding, host_cpu, jit_watch

PARTIAL_FILE = "partial.json"
PERF_UNFINISHED = "perf_unfinished"  # the timed workloads measure() finished so far, while it runs

_kept: dict = {"res": None, "path": None}  # one job per driver process


def keep(res: dict) -> dict:
    """Register ``res``, the driver's result in progress, for ``checkpoint``; returns it."""
    _kept["res"] = res
    checkpoint()
    return res


def checkpoint() -> None:
    """Write the registered result to PARTIAL_FILE (atomically); a no-op outside ``main`` or before ``keep``."""
    res, path = _kept["res"], _kept["path"]
    if res is None or path is None:
        return
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(res, f)
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError) as exc:  # progress is a convenience: never the cause of a failed run
        print(f"fk: could not write {path}: {type(exc).__name__}: {exc}", flush=True)


OUTPUTS_FILE = "outputs.safetensors"  # the correctness batch's outputs of a run that is not token generation


def save_outputs(tensors: dict, name: str) -> str:
    """Save output tensors (safetensors) in the run's folder ($FK_RUN_DIR, else here); the file's absolute path."""
    from safetensors.torch import save_file

    path = os.path.abspath(os.path.join(os.environ.get("FK_RUN_DIR") or os.getcwd(), name))
    save_file(tensors, path)
    return path


def phase(name: str) -> None:
    """A progress line; the runner echoes lines starting with [fk]. What the phases before it measured is kept."""
    checkpoint()
    print(f"[fk] {name}", flush=True)


@contextlib.contextmanager
def unfinished_perf():
    """A perf dict to fill in place; until the block ends it is kept as PERF_UNFINISHED (a crash keeps its finished
    workloads under that name, never as "perf")."""
    out: dict = {"throughput": {}, "latency": {}}
    res = _kept["res"]
    if res is not None:
        res[PERF_UNFINISHED] = out
    checkpoint()  # everything measured before the first (possibly fatal) warm-up
    yield out
    if res is not None:
        res.pop(PERF_UNFINISHED, None)  # the caller stores the whole of it as "perf"


def clean_timing(out: dict, what: str, fn, *args):
    """``fn(*args)``, run again (up to ``jit_watch.RETIME_MAX`` times) while Triton compiles or autotunes a kernel
    in it: one-time work, not serving (``jit_watch``). Each discarded run is listed in ``out["retimed"]``; the result
    kept is the first with no compile, else the last, then named in ``out["compiled_while_timed"]``; every call is in
    ``out["timeline"]``."""
    for attempt in range(jit_watch.RETIME_MAX + 1):
        mark, started, cpu, steal = jit_watch.Since(), time.time(), host_cpu.jiffies(), host_cpu.stolen()
        res = fn(*args)
        compiled, busy, stole = mark.new(), host_cpu.busy_since(cpu), host_cpu.steal_since(steal)
        seconds = res[0] if isinstance(res, tuple) else res
        # when each timed call ran (wall clock), how busy the host was and what its hypervisor took: to line one
        # process's slow run up with what else ran on the machine
        out.setdefault("timeline", []).append({"workload": what, "at": round(started, 2), "s": round(seconds, 4),
                                               "host_busy": busy, **({} if stole is None else {"host_steal": stole})})
        if not compiled:
            return res
        entry = {"workload": what, "elapsed_s": seconds, "compiled": jit_watch.summary(compiled)}
        out.setdefault("retimed" if attempt < jit_watch.RETIME_MAX else "compiled_while_timed", []).append(entry)
    return res


def warmup_prompts(prompts: list, share: float) -> list:
    """The requests a throughput warm-up pass serves: all of them, or the first ``share`` of them (at least one).
    A shorter warm-up may leave a shape uncompiled; a timed repeat that compiles is run again (``clean_timing``)."""
    return prompts if share >= 1 else prompts[:max(1, math.ceil(len(prompts) * share))]


def measure(perf: dict, timed) -> dict:
    """Throughput and latency rows over repeats (latency: ``latency_repeats``, where the job gives them), after
    warming up on the very same workload (throughput: its first ``warmup_share``, where the job gives one)."""
    reps, warm, share = perf.get("repeats", 3), perf.get("warmup", 1), perf.get("warmup_share", 1.0)
    with unfinished_perf() as out:
        for name, w in perf.get("throughput", {}).items():
            for _ in range(warm):  # by default the full workload: every shape the timed repeats meet compiles first
                timed(warmup_prompts(w["prompts"], share), w["output_len"])
            rows = []
            for i in range(reps):
                phase(f"throughput {name}: repeat {i + 1}/{reps}")
                dt, n_in, n_out = clean_timing(out, f"throughput {name}", timed, w["prompts"], w["output_len"])
                rows.append({"elapsed_s": dt, "tokens_per_s": (n_in + n_out) / dt,
                             "output_tokens_per_s": n_out / dt, "input_tokens": n_in, "output_tokens": n_out})
            out["throughput"][name] = rows
            checkpoint()
        lat_reps = perf.get("latency_repeats", reps)
        for name, w in perf.get("latency", {}).items():
            for _ in range(warm):
                timed(w["prompts"], w["output_len"])
            phase(f"latency {name}: {lat_reps} repeats")
            out["latency"][name] = [
                {"latency_s": clean_timing(out, f"latency {name}", timed, w["prompts"], w["output_len"])[0]}
                for _ in range(lat_reps)]
            checkpoint()
    return out


def measure_items(perf: dict, timer) -> dict:
    """Per batch size b of ``perf["batches"]``: items/s over ``iters`` calls per repeat, after warming up, and the
    latency of one call. ``timer(b)`` -> ``timed(n)``: the seconds of n calls on that batch, the device synced."""
    reps, warm, iters = perf.get("repeats", 3), perf.get("warmup", 1), perf.get("iters", 8)
    with unfinished_perf() as out:
        for b in perf["batches"]:
            timed = timer(b)
            for _ in range(warm):
                timed(1)
            rows = []
            for i in range(reps):
                phase(f"throughput batch{b}: repeat {i + 1}/{reps}")
                dt = clean_timing(out, f"throughput batch{b}", timed, iters)
                rows.append({"elapsed_s": dt, "items": b * iters, "items_per_s": b * iters / dt})
            out["throughput"][f"batch{b}"] = rows
            out["latency"][f"batch{b}"] = [{"latency_s": clean_timing(out, f"latency batch{b}", timed, 1)}
                                           for _ in range(reps)]
            checkpoint()
    return out


def _bind_cpus() -> str | None:
    """This process bound to the CPUs the runner asked for (``cpu_binding``); the CPU list it runs on."""
    try:
        return cpu_binding.apply()
    except (OSError, ValueError) as exc:
        print(f"[fk] warning: not bound to the CPUs ${cpu_binding.VAR} names ({exc})", flush=True)
        return None


def main(run, argv=None) -> int:
    """``python -m <driver> JOB.json RESULT.json``: run the job, always write a result. A run that raises still
    carries what its finished phases measured (``keep``), listed in "kept_from_partial"."""
    job_path, result_path = sys.argv[1:] if argv is None else argv
    with open(job_path) as f:
        job = json.load(f)
    _kept.update(res=None, path=os.path.join(os.path.dirname(os.path.abspath(result_path)), PARTIAL_FILE))
    unwatched = jit_watch.ready()
    if unwatched:
        print(f"[fk] warning: {unwatched}", flush=True)
    host_cpus = _bind_cpus()
    try:
        res = run(job)
    except Exception as exc:
        kept = dict(_kept["res"] or {})
        res = {**kept, "status": "error", "error": f"{type(exc).__name__}: {exc}",
               "traceback": traceback.format_exc()}
        if kept:
            res["kept_from_partial"] = sorted(kept)
        print(res["traceback"], flush=True)  # into the run's log, where the report points
    if host_cpus:
        res.setdefault("host_cpus", host_cpus)  # the engine's whole session, where the driver read it
    tmp = f"{result_path}.tmp"
    with open(tmp, "w") as f:  # whole or absent: a process killed while writing leaves no half result
        json.dump(res, f)
    os.replace(tmp, result_path)
    return 0 if res["status"] == "ok" else 1
