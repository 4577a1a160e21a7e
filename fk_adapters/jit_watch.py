"""Triton kernels compiled while a repeat was timed, so that one-time work is not read as serving speed.

Every engine process fk starts runs with Triton's file cache wrapped by ``triton_compile_log`` (``engine_env``): each
kernel compiled by that run's processes (the engine's workers and Inductor's compile workers included) is appended to
the run's own log. The driver notes the log's length before a timed repeat and reads the kernels added after it. Only
the run's own processes write there: another engine compiling on the same machine, or a kernel loaded from a cache
another process filled, is not counted (session 43 found both miscounted by watching the shared cache folders).
Seen on an H200 (session 42): single timed runs of fk46-mixtral in early engine processes ran 0.8-1.6 s long.
Each config an ``@triton.autotune`` benchmarks is logged too (``autotune:NAME``): a new key benchmarks every config
even where the binaries came from the cache."""
from __future__ import annotations

import importlib
import os

from fk_adapters import engine_runs

RETIME_MAX = 2  # re-runs of one timed repeat during which a kernel was compiled
LOG_VAR = "FK_TRITON_COMPILE_LOG"
SHARED_DIR_VAR = "FK_TRITON_CACHE_DIR"  # the one Triton cache folder of every engine process (triton_compile_log)
AUTOTUNE_PREFIX = "autotune:"  # a log line of one config benchmarked, not a compile
LOG_FILE = "triton_compiles.log"
MANAGER = "fk_adapters.triton_compile_log:LoggingCacheManager"


def engine_env(run_dir: str) -> dict:
    """Environment entries for one engine run whose compiles are logged into ``run_dir``, its Triton cache the one
    folder every engine process shares; none where the user set a cache manager of their own (compiles then go
    unwatched, the cache where the engine puts it)."""
    if os.environ.get("TRITON_CACHE_MANAGER", MANAGER) != MANAGER:
        return {}
    return {"TRITON_CACHE_MANAGER": MANAGER, LOG_VAR: os.path.join(os.path.abspath(run_dir), LOG_FILE),
            SHARED_DIR_VAR: shared_cache_dir()}


def shared_cache_dir() -> str:
    """The Triton cache folder of this process before any engine changes it: ``$TRITON_CACHE_DIR``, else Triton's
    default under ``$TRITON_HOME`` or the home folder."""
    return (os.environ.get("TRITON_CACHE_DIR", "").strip()
            or os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache"))


def ready() -> str:
    """'' where this process's compiles are logged or were never asked to be; else why not, with the log switched off
    for this process and those it starts (Triton fails every compile whose cache manager it cannot import)."""
    if os.environ.get("TRITON_CACHE_MANAGER") != MANAGER:
        return ""
    try:
        importlib.import_module(MANAGER.split(":")[0])
    except Exception as exc:  # noqa: BLE001 (any failure: no Triton, a broken install)
        os.environ.pop("TRITON_CACHE_MANAGER")
        os.environ.pop(LOG_VAR, None)
        return f"Triton compiles are not watched here ({type(exc).__name__}: {exc}): timed repeats are not re-run"
    return ""


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class Since:
    """The kernels this run's processes compiled after this mark: ``Since().new()``."""

    def __init__(self, log: str | None = None):
        self.log = log if log is not None else os.environ.get(LOG_VAR, "")
        self.at = _size(self.log) if self.log else 0

    def new(self) -> list[str]:
        if not self.log or _size(self.log) <= self.at:
            return []
        with open(self.log, "rb") as f:
            f.seek(self.at)
            lines = f.read().decode(errors="replace").splitlines()
        return [ln.split(" ", 1)[1] if " " in ln else "?" for ln in lines if ln.strip()]


def summary(kernels: list[str]) -> str:
    """'fused_moe_kernel x2, _layer_norm_fwd x1': each kernel compiled and how often."""
    return ", ".join(f"{k} x{kernels.count(k)}" for k in sorted(set(kernels)))


def findings(runs: dict) -> list[str]:
    """Over a scenario's engine runs ({side: [round 1, ...]}): one line per run whose timed repeats met a Triton
    compile, with the repeats timed again and any kept timing that still contains one."""
    out = []
    for where, _, _, res in engine_runs.each(runs):
        perf = res.get("perf") or {}
        redone, kept = perf.get("retimed") or [], perf.get("compiled_while_timed") or []
        if redone:
            out.append(f"{where}: {len(redone)} timed run(s) re-run, Triton compiled or autotuned kernels during them: "
                       + "; ".join(f"{e['workload']} {e['elapsed_s']:.3g} s ({e['compiled']})" for e in redone))
        if kept:
            out.append(f"{where}: still compiling after {RETIME_MAX} re-runs, these timings include it: "
                       + "; ".join(f"{e['workload']} ({e['compiled']})" for e in kept))
    return out
