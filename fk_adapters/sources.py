"""Where a module's package lies, and a digest of its code: what names a plugin (or fk) wherever it is installed."""
from __future__ import annotations

import hashlib
import importlib.util
import pathlib


def package_root(module: str) -> pathlib.Path | None:
    """The folder of ``module``'s top-level package (or its single file), None where it cannot be found."""
    spec = importlib.util.find_spec(module.split(".")[0])
    if spec is None or not spec.origin:
        return None
    origin = pathlib.Path(spec.origin)
    return origin.parent if spec.submodule_search_locations else origin


def source_digest(module: str) -> str:
    """sha256 over the relative paths and bytes of the .py files of ``module``'s top-level package."""
    root = package_root(module)
    if root is None:
        return ""
    files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root.parent).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()
