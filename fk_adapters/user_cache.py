"""fk's own folder of caches that outlive a run: ``FK_CACHE_HOME``, else ``<XDG cache>/fk-adapters``."""
from __future__ import annotations

import json
import os


def write_json(path: str, data) -> None:
    """Write ``data`` to the cache file ``path`` whole or not at all (processes of concurrent runs write side by side);
    raises OSError where it cannot."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def home() -> str:
    if os.environ.get("FK_CACHE_HOME"):
        return os.environ["FK_CACHE_HOME"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fk-adapters")


def default_model_cache() -> str:
    """Where ``--model-cache`` writes seeded checkpoints unless told otherwise."""
    return os.path.join(os.path.expanduser("~"), ".cache", "fk-adapters", "models")
