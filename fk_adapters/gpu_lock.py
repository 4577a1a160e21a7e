"""One fk engine process at a time on a machine's GPUs: two at once would time each other.

Each CUDA engine run holds an exclusive ``flock`` on ``<FK_LOCK_DIR or the temp dir>/fk-gpu-<devices>.lock``
(``<devices>``: the engine's CUDA_VISIBLE_DEVICES, or "all"); another fk run on the same devices waits for it and
says so. Runs given different CUDA_VISIBLE_DEVICES take different locks; ``gpu_share`` still flags any overlap.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import time


def lock_path(env: dict) -> str:
    devices = env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", "")).strip() or "all"
    lock_dir = os.environ.get("FK_LOCK_DIR") or tempfile.gettempdir()
    return os.path.join(lock_dir, f"fk-gpu-{re.sub(r'[^A-Za-z0-9,_-]', '_', devices)}.lock")


@contextlib.contextmanager
def held(path: str, say=print, what: str = "the GPU", who: str = "another fk engine run"):
    """Hold the lock at ``path``; when another process has it, ``say`` who and wait."""
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            say(f"waiting for {what}: {who} holds {path} ({f.read().strip() or 'unknown'})")
            t0 = time.perf_counter()
            fcntl.flock(f, fcntl.LOCK_EX)
            say(f"got {what} after {time.perf_counter() - t0:.0f} s")
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}, since {time.strftime('%H:%M:%S')}\n")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
