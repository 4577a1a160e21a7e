"""Which machine, and which hold of it, a run was made on: a reused baseline must come from the same one.

A lent GPU machine is a fresh host per hold, and a timing is comparable only with timings of the same hold. The
identity is the host name, the kernel's boot id, and a token written once into the temp dir (fresh per hold, even
on a host that did not reboot).
"""
from __future__ import annotations

import os
import socket
import tempfile
import uuid

TOKEN_FILE = "fk-machine-hold"


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def _hold_token() -> str:
    path = os.path.join(tempfile.gettempdir(), TOKEN_FILE)
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        token = uuid.uuid4().hex
        try:
            with open(path, "x") as f:
                f.write(token)
        except FileExistsError:  # another fk process wrote it first
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return ""
        return token


def identity() -> dict:
    return {"host": socket.gethostname(), "boot_id": _boot_id(), "hold": _hold_token()}


def same(a: dict | None, b: dict | None) -> bool:
    return bool(a) and bool(b) and all(a.get(k) == b.get(k) for k in ("host", "boot_id", "hold"))


# Environment variables that change what an engine process compiles, tunes or runs (fk's engine processes inherit
# fk's environment): a timing is comparable only with one made under the same. Left out: which devices, and where
# files go (caches, tools), which change no result.
TUNING_PREFIXES = ("TRITON_", "VLLM_", "SGLANG_", "TORCHINDUCTOR_", "TORCH_", "PYTORCH_", "NCCL_", "CUDA_")
PLACES = ("_DIR", "_PATH", "_ROOT", "_HOME", "_FILE")


def tuning_env(environ=None) -> dict:
    """The tuning variables set in ``environ`` (default: this process's), by name."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items())
            if k.startswith(TUNING_PREFIXES) and not k.endswith(PLACES) and k != "CUDA_VISIBLE_DEVICES"}
