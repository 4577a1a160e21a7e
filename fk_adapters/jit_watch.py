"""Triton kernels compiled while a repeat was timed, so that one-time work is not read as serving speed.

A kernel's first compile writes a new entry into a Triton cache folder: Triton's own (``$TRITON_CACHE_DIR``, else
``$TRITON_HOME/.triton/cache``, else ``~/.triton/cache``), Inductor's (where it set TRITON_CACHE_DIR first) or, in
vLLM's compiled mode, the ``triton_cache`` folder vLLM points its engine process at inside its compile cache (under
the engine's cache root, which fk sets per variant: ``EngineSpec.cache_var``). The driver lists those folders before
and after a timed repeat, and the new entries name the kernels compiled meanwhile. Nothing runs inside the engine's
processes (both sides stay as they are). Loads of kernels already on disk are not seen; a compile by another program
using the same folder at that moment is (a repeat then runs again for nothing). Seen on an H200 (session 42): after a
full warm-up, single timed runs of fk46-mixtral in early engine processes ran 0.8-1.6 s long, on both sides.
"""
from __future__ import annotations

import getpass
import glob
import os
import re
import tempfile

RETIME_MAX = 2  # re-runs of one timed repeat during which a kernel was compiled


def cache_dir() -> str:
    if os.environ.get("TRITON_CACHE_DIR"):
        return os.environ["TRITON_CACHE_DIR"]
    return os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache")


ENGINE_TRITON_FOLDER = "triton_cache"  # vLLM's, inside its compile cache (compilation/compiler_interface.py)


def folders() -> list[str]:
    """Triton's own cache folder and every engine ``triton_cache`` folder under the engines' cache roots."""
    from fk_adapters.engines import ENGINES

    out = [cache_dir(), *_inductor_triton_folders()]
    for root in {os.environ.get(spec.cache_var) for spec in ENGINES.values() if spec.cache_var} - {None, ""}:
        for here, dirs, _ in os.walk(root):
            if ENGINE_TRITON_FOLDER in dirs:
                out.append(os.path.join(here, ENGINE_TRITON_FOLDER))
            dirs[:] = [d for d in dirs if d not in (ENGINE_TRITON_FOLDER, "inductor_cache")]
    return out


def _inductor_triton_folders() -> list[str]:
    """Where a process that ran an Inductor kernel before any Triton compile sends later compiles: Inductor then sets
    TRITON_CACHE_DIR to ``<its cache>/triton/<device>`` when none is set (torch's ``triton_heuristics``)."""
    base = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), "torchinductor_" + re.sub(r"[\\/:]", "_", getpass.getuser()))
    return sorted(glob.glob(os.path.join(base, "triton", "*")))


def _entries(folder: str) -> set[str]:
    try:
        return {os.path.join(folder, e) for e in os.listdir(folder)}
    except OSError:
        return set()


def _kernel_name(entry: str) -> str:
    """The kernel a cache entry holds: its metadata file's name, '?' when it has none (yet)."""
    try:
        names = sorted(f for f in os.listdir(entry) if f.endswith(".json") and not f.startswith("__grp__"))
    except OSError:
        names = []
    return names[0].split(".")[0] if names else "?"


class Since:
    """The kernels compiled after this mark: ``Since().new()``."""

    def __init__(self, where: list[str] | None = None):
        self.where = where
        self.before = self._entries()

    def _entries(self) -> set[str]:
        return set().union(*(_entries(f) for f in (self.where or folders())))

    def new(self) -> list[str]:
        return [_kernel_name(e) for e in sorted(self._entries() - self.before)]


def summary(kernels: list[str]) -> str:
    """'fused_moe_kernel x2, _layer_norm_fwd x1': each kernel compiled and how often."""
    return ", ".join(f"{k} x{kernels.count(k)}" for k in sorted(set(kernels)))


def findings(runs: dict) -> list[str]:
    """Over a scenario's engine runs ({side: [round 1, ...]}): one line per run whose timed repeats met a Triton
    compile, with the repeats timed again and any kept timing that still contains one."""
    out = []
    several = max((len(r) for r in runs.values()), default=0) > 1
    for side, results in runs.items():
        for rnd, res in enumerate(results, 1):
            perf = res.get("perf") or {}
            where = f"round {rnd} {side}" if several else side
            redone, kept = perf.get("retimed") or [], perf.get("compiled_while_timed") or []
            if redone:
                out.append(f"{where}: {len(redone)} timed run(s) re-run, Triton compiled kernels during them: "
                           + "; ".join(f"{e['workload']} {e['elapsed_s']:.3g} s ({e['compiled']})" for e in redone))
            if kept:
                out.append(f"{where}: still compiling after {RETIME_MAX} re-runs, these timings include it: "
                           + "; ".join(f"{e['workload']} ({e['compiled']})" for e in kept))
    return out
