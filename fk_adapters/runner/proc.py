"""Run one engine job in its own process with a time limit; a crash or hang becomes a result."""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time

from fk_adapters import cpu_binding, gpu_lock, gpu_share, wall_time
from fk_adapters.engines.driver_common import PARTIAL_FILE  # the driver's results so far, kept when it fails
from fk_adapters.runner import reaper as reapers

GPU_SHARE_FILE = "gpu_share.json"


def run_job(python: str, driver: str, job: dict, run_dir: str, env: dict, timeout_s: float,
            echo=None, watch_gpu: bool = False) -> dict:
    """Write the job, run the driver, return its result (status ok/error/crashed/timeout) with log path.

    ``watch_gpu``: a CUDA run: wait for the machine's GPU lock (``gpu_lock``: one fk engine process at a time) and
    watch the GPU for other processes while the engine runs (``gpu_share.Watcher``); what it saw is the result's
    "gpu_share", also written to gpu_share.json in ``run_dir``; the wait for the lock, its "gpu_wait_s"; the engine
    process bound to its GPUs' host CPUs (``cpu_binding``), the plan its "cpu_binding"."""
    run_dir = os.path.abspath(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    job_path, result_path, log_path = (os.path.join(run_dir, n) for n in ("job.json", "result.json", "engine.log"))
    with open(job_path, "w") as f:
        json.dump(job, f)
    for stale in (result_path, *(os.path.join(run_dir, n) for n in (GPU_SHARE_FILE, PARTIAL_FILE))):
        if os.path.exists(stale):
            os.remove(stale)
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", FK_RUN_DIR=run_dir, **env)
    full_env.pop(cpu_binding.VAR, None)
    binding = cpu_binding.plan(full_env) if watch_gpu else None
    if binding and "cpus" in binding:
        full_env[cpu_binding.VAR] = binding["cpus"]
    say = echo or (lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    asked = time.perf_counter()
    with gpu_lock.held(gpu_lock.lock_path(full_env), say) if watch_gpu else contextlib.nullcontext():
        waited = time.perf_counter() - asked
        res = _run(python, driver, job_path, result_path, log_path, full_env, timeout_s, echo, watch_gpu, run_dir)
    if watch_gpu:
        res.update(gpu_wait_s=round(waited, 1), cpu_binding=binding)
    return res


def _run(python, driver, job_path, result_path, log_path, full_env, timeout_s, echo, watch_gpu, run_dir) -> dict:
    """The engine process itself: started, followed, killed at the deadline, its result read."""
    t0 = time.perf_counter()
    with open(log_path, "w", buffering=1) as log:  # line-buffered: the log can be followed live
        proc = subprocess.Popen([python, "-m", driver, job_path, result_path], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=full_env, text=True, start_new_session=True,
                                cwd=run_dir)  # never import fk_adapters from a source tree in the cwd
        reaper = reapers.start(proc.pid)
        try:
            watcher = gpu_share.Watcher(proc.pid).start() if watch_gpu else None
            marks: list[list] = []
            stopped = _follow(proc, log, echo, t0, t0 + timeout_s, marks)  # "" unless fk must stop it
            if stopped:
                _kill_tree(proc)
            proc.wait()
            shared = watcher.stop() if watcher else None
            log.write(proc.stdout.read() if not stopped else "")
        finally:  # also on Ctrl-C or a signal that stops fk: the engine goes with it
            _kill_tree(proc)
            reapers.stop(reaper)
    wall = time.perf_counter() - t0
    if stopped == TIMEOUT:
        res = {"status": "timeout", "error": f"engine run exceeded {timeout_s:.0f} s and was killed"}
    elif stopped:
        res = {"status": "crashed", "error": stopped}
    elif os.path.exists(result_path):
        with open(result_path) as f:
            res = json.load(f)
    else:
        res = {"status": "crashed", "error": f"engine process exited with code {proc.returncode} without a result"}
    res["returncode"] = proc.returncode
    res["wall_s"] = wall
    res["log"] = log_path
    with open(log_path, errors="replace") as f:
        text = f.read()
    res["phases"] = wall_time.process(marks, wall, text, res.get("engine_core"))
    if shared is not None:
        res["gpu_share"] = shared
        with open(os.path.join(run_dir, GPU_SHARE_FILE), "w") as f:
            json.dump(shared, f)
    if res["status"] != "ok":
        _keep_partial(res, os.path.join(run_dir, PARTIAL_FILE))
        res["log_tail"] = text[-4000:]
        cause = first_logged_error(text)
        if cause and cause not in res.get("error", ""):
            res["error"] = f"{res.get('error', '')} (first logged error: {cause})"
    return res


TIMEOUT = "timeout"
# Lines after which no engine recovers: a CUDA context that took an illegal address, a process aborting, an engine
# core or worker reported dead. Such an engine can hang in its teardown (a worker stuck on the broken context held two
# GPUs for 16 minutes at TP=2); once one is logged and the output then stops for QUIET_AFTER_FATAL_S, fk kills it.
FATAL = re.compile(r"CUDA error: an illegal (memory access|instruction)|^terminate called after throwing|"
                   r"Worker failed with error|Engine core initialization failed|EngineDeadError|"
                   r"CUDA error: unspecified launch failure")
QUIET_AFTER_FATAL_S = 120.0


def _follow(proc: subprocess.Popen, log, echo, t0: float, deadline: float, marks: list) -> str:
    """Copy the engine's output into its log until it ends (""), the deadline passes (TIMEOUT) or it went quiet after
    a fatal line (why, as a sentence), echoing its [fk] progress lines and adding each to ``marks`` with when it
    arrived."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    fatal, last_line = "", time.perf_counter()
    while True:
        now = time.perf_counter()
        left = deadline - now
        if left <= 0:
            return TIMEOUT
        if fatal and now - last_line >= QUIET_AFTER_FATAL_S:
            return (f"the engine logged a fatal error ({fatal[:200]}) and printed nothing for "
                    f"{QUIET_AFTER_FATAL_S:.0f} s: killed")
        if not sel.select(timeout=min(left, 1.0)):
            if proc.poll() is not None:
                return ""
            continue
        line = proc.stdout.readline()
        if not line:
            return ""
        last_line = time.perf_counter()
        if not fatal and FATAL.search(line):
            fatal = line.strip()
        log.write(line)
        if line.startswith("[fk]"):  # the phase, and when it began in this engine run
            marks.append([line[5:].rstrip(), round(time.perf_counter() - t0, 2)])
            if echo:
                echo(f"{marks[-1][0]} [{marks[-1][1]:.0f} s]")


def _keep_partial(res: dict, path: str) -> None:
    """A failed run keeps the phase results its driver had written (``PARTIAL_FILE``): the keys its result lacks,
    listed in ``kept_from_partial``."""
    try:
        with open(path) as f:
            partial = json.load(f)
    except (OSError, ValueError):
        return
    kept = sorted(k for k in partial if k not in res)
    if kept:
        res.update({k: partial[k] for k in kept})
        res["kept_from_partial"] = kept


_EXCEPTION = r"([A-Za-z_][\w.]*(?:Error|Exception)): (.+)"
_LOGGED_ERROR = re.compile(r"\bERROR\b.*?\b" + _EXCEPTION)
_TRACEBACK_END = re.compile("^" + _EXCEPTION)


def first_logged_error(log_text: str, limit: int = 300) -> str | None:
    """The engine's root cause, which its helper processes log before the driver sees only a generic
    failure ("See root cause above"): the first ``ERROR``-level line that names an exception, else
    the exception that ends the first traceback (SGLang's schedulers log theirs without a level)."""
    lines = log_text.splitlines()
    m = next(filter(None, map(_LOGGED_ERROR.search, lines)), None) or _first_traceback_end(lines)
    return f"{m.group(1)}: {m.group(2).strip()}"[:limit] if m else None


def _first_traceback_end(lines: list[str]) -> re.Match | None:
    in_traceback = False
    for line in lines:
        in_traceback = in_traceback or line.rstrip().endswith("Traceback (most recent call last):")
        m = _TRACEBACK_END.match(line) if in_traceback else None
        if m:
            return m
    return None


def _kill_tree(proc: subprocess.Popen) -> None:
    """The engine's process group, and its processes that left the group."""
    reapers.kill_tree(proc.pid, reapers.descendants(proc.pid))
