"""Finding the JSON files fk wrote (results, captures, capture failures) under some folders."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator

from fk_adapters.results import Kind, Record, from_dict, kind_of


def json_objects(roots: list[str]) -> Iterator[tuple[str, dict]]:
    """(path, object) of every readable ``*.json`` holding a JSON object under ``roots``."""
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for name in files:
                if not name.endswith(".json"):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    with open(path, encoding="utf-8") as f:
                        obj = json.load(f)
                except (OSError, ValueError):
                    continue
                if isinstance(obj, dict):
                    yield path, obj


def records(roots: list[str]) -> Iterator[tuple[str, Record]]:
    """(path, record) of every fk results file under ``roots`` (other JSON files are passed over)."""
    for path, obj in json_objects(roots):
        if kind_of(obj) is not None:
            yield path, from_dict(obj, path)


def is_capture(obj: dict) -> bool:
    """A workload file of ``fk capture``."""
    return kind_of(obj) is Kind.CAPTURE
