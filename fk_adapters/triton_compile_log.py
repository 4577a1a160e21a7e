"""The Triton cache manager fk's engine processes run with: Triton's own file cache, which also appends the name of each
kernel it compiles to ``$FK_TRITON_COMPILE_LOG`` (``jit_watch`` reads it). Loaded by Triton from
``TRITON_CACHE_MANAGER``; a compile stores its metadata file once, a load from disk stores nothing.

The cache's folder is ``$FK_TRITON_CACHE_DIR`` where set (``jit_watch.engine_env``: the folder Triton would use in
fk's own process), not ``$TRITON_CACHE_DIR``: vLLM points that into each side's compile-cache folder, under a hash of
its own environment variables, so the engine's own kernels (fused MoE, FLA, the SSD scan) compiled once per side and
again whenever a vLLM variable changed (session 58: 284 a side, with a hold's staged caches). Triton keys each
binary by its source, options and Triton build, so one folder for every side is safe.

Autotuning is one-time work too, and a kernel whose binaries another process already compiled still benchmarks
every config at each new key: importing this module also logs each config an ``@triton.autotune`` benchmarks, as
``autotune:NAME``."""
from __future__ import annotations

import functools
import os

from triton.runtime.cache import FileCacheManager

from fk_adapters.jit_watch import AUTOTUNE_PREFIX, LOG_VAR, SHARED_DIR_VAR


def _log(name: str) -> None:
    log = os.environ.get(LOG_VAR)
    if not log:
        return
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:  # one short write with O_APPEND: lines from several processes never interleave
        os.write(fd, f"{os.getpid()} {name}\n".encode())
    finally:
        os.close(fd)


class LoggingCacheManager(FileCacheManager):
    def __init__(self, key, override=False, dump=False):
        shared = os.environ.get(SHARED_DIR_VAR)
        if override or dump or not shared:
            super().__init__(key, override, dump)
            return
        self.key = key  # the attributes FileCacheManager's methods use, as its own __init__ sets them
        self.cache_dir = os.path.join(shared, key)
        self.lock_path = os.path.join(self.cache_dir, "lock")
        os.makedirs(self.cache_dir, exist_ok=True)

    def put(self, data, filename, binary=True) -> str:
        path = super().put(data, filename, binary)
        compiled = filename.endswith(".json") and not filename.endswith(".autotune.json")  # a tuning result: logged
        if compiled and not filename.startswith("__grp__"):  # by the watch below
            _log(filename[:-len(".json")])
        return path


def watch_autotuning() -> bool:
    """Wrap Triton's per-config autotune benchmark (``Autotuner._bench``, Triton 3.x) so that each call is logged;
    False where this Triton has none (autotuning then goes unwatched)."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return False
    bench = getattr(Autotuner, "_bench", None)
    if bench is None:
        return False
    if getattr(bench, "fk_watched", False):
        return True

    @functools.wraps(bench)
    def logged(self, *args, **kwargs):
        fn = getattr(self, "base_fn", None) or getattr(self, "fn", None)
        _log(AUTOTUNE_PREFIX + getattr(fn, "__name__", "?"))
        return bench(self, *args, **kwargs)

    logged.fk_watched = True
    Autotuner._bench = logged
    return True


AUTOTUNE_WATCHED = watch_autotuning()
