"""The Triton cache manager fk's engine processes run with: Triton's own file cache, which also appends the name of each
kernel it compiles to ``$FK_TRITON_COMPILE_LOG`` (``jit_watch`` reads it). Loaded by Triton from
``TRITON_CACHE_MANAGER``; a compile stores its metadata file once, a load from disk stores nothing."""
from __future__ import annotations

import os

from triton.runtime.cache import FileCacheManager

from fk_adapters.jit_watch import LOG_VAR


class LoggingCacheManager(FileCacheManager):
    def put(self, data, filename, binary=True) -> str:
        path = super().put(data, filename, binary)
        log = os.environ.get(LOG_VAR)
        if log and filename.endswith(".json") and not filename.startswith("__grp__"):
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:  # one short write with O_APPEND: lines from several processes never interleave
                os.write(fd, f"{os.getpid()} {filename[:-len('.json')]}\n".encode())
            finally:
                os.close(fd)
        return path
