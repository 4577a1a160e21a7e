"""The Triton cache manager fk's engine processes run with: Triton's own file cache, which also appends the name of each
kernel it compiles to ``$FK_TRITON_COMPILE_LOG`` (``jit_watch`` reads it). Loaded by Triton from
``TRITON_CACHE_MANAGER``; a compile stores its metadata file once, a load from disk stores nothing.

Autotuning is one-time work too, and a kernel whose binaries another process already compiled still benchmarks
every config at each new key: importing this module also logs each config an ``@triton.autotune`` benchmarks, as
``autotune:NAME``."""
from __future__ import annotations

import functools
import os

from triton.runtime.cache import FileCacheManager

from fk_adapters.jit_watch import AUTOTUNE_PREFIX, LOG_VAR


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
