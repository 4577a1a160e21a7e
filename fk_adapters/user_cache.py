"""fk's own folder of caches that outlive a run: ``FK_CACHE_HOME``, else ``<XDG cache>/fk-adapters``."""
from __future__ import annotations

import os


def home() -> str:
    if os.environ.get("FK_CACHE_HOME"):
        return os.environ["FK_CACHE_HOME"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fk-adapters")
