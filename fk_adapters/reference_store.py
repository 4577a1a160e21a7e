"""fk's store of float32 references: each made once per job, engine build and device, and reused after that.

A bf16/fp16 run that fails the fixed thresholds is judged against a float32 run of the stock engine (or of HF
transformers). That run depends only on its job (checkpoint, prompts), the engine's files and the device, so fk keeps
each one it makes under ``<FK_CACHE_HOME>/references/`` and a later run of the same job (another plugin, another
`fk run`, a later hold that carries the folder) is judged against it instead of starting the float32 process again.
Only references of engines verified unmodified against their RECORD are kept or reused.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time

from fk_adapters import user_cache

FOLDER = "references"
MADE_FILE = "made.json"


def identity(engine_entry: dict | None, device: str) -> dict | None:
    """What decides a float32 run besides its job: each of the engine's distributions at its version (as
    ``engine_integrity.verify`` read them), the device (``cpu``, or the GPUs' names) and the tuning variables; None
    where the engine is not verified unmodified (its float32 run is no stock reference to keep)."""
    from fk_adapters import machine

    if not (engine_entry or {}).get("unmodified"):
        return None
    dists = [engine_entry] + list(engine_entry.get("also") or [])
    return {"dists": [f"{d.get('dist')}=={d.get('version')}" for d in dists], "device": device,
            "tuning_env": machine.tuning_env()}


def weights_fingerprint(model_dir: str | None, edge: int = 1 << 20) -> str:
    """The checkpoint in ``model_dir`` as its files' names, sizes and first and last ``edge`` bytes: a job names its
    checkpoint by folder, and a folder written again (another fk's seeded weights, another generator) holds other
    numbers under the same name. Seeded random weights differ everywhere, so their edges tell them apart."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(model_dir or ""):
        dirs.sort()
        for name in sorted(f for f in files if not f.endswith(".lock")):
            path = os.path.join(root, name)
            size = os.path.getsize(path)
            h.update(f"{os.path.relpath(path, model_dir)}:{size}:".encode())
            with open(path, "rb") as f:
                h.update(f.read(edge))
                if size > 2 * edge:
                    f.seek(size - edge)
                    h.update(f.read(edge))
    return h.hexdigest()


def folder(who: dict, scenario: str, side: str, job: dict, weights: str | None = None) -> str:
    """The store's folder for this reference (the job's checkpoint by ``weights_fingerprint``, given as ``weights``
    where the caller has it); it holds ``logs/<scenario>/<side>/`` as the run that made it did."""
    weights = weights_fingerprint(job.get("model_dir")) if weights is None else weights
    key = {"who": who, "side": side, "job": job, "weights": weights}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]
    return os.path.join(user_cache.home(), FOLDER, f"{scenario}-{side}-{digest}")


def run_dir(where: str, scenario: str, side: str) -> str:
    return os.path.join(where, "logs", scenario, side)


def made(where: str) -> dict:
    """When, where and why (the engine's own float32 run could not make it, for a transformers reference) the
    reference in ``where`` was made; {} where nothing is stored."""
    try:
        with open(os.path.join(where, MADE_FILE)) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}


def keep(where: str, scenario: str, side: str, source_run: str, why_not_engine: str = "") -> bool:
    """Copy a finished reference run's folder into the store at ``where`` (whole, then renamed into place: a run
    beside it making the same reference keeps the first); whether it is stored now."""
    if made(where):
        return True
    os.makedirs(os.path.dirname(where), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".incoming-", dir=os.path.dirname(where))
    try:
        shutil.copytree(source_run, run_dir(tmp, scenario, side))
        with open(os.path.join(tmp, MADE_FILE), "w") as f:
            json.dump({"made": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "at": time.time(),
                       "host": socket.gethostname(), "from": os.path.abspath(source_run),
                       "why_not_engine": why_not_engine}, f)
        os.rename(tmp, where)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return bool(made(where))
    return True
