"""Reading results files: the one place that tells a file's kind (from its ``kind`` key, or, for files written
before fk stamped one, from its keys)."""
from __future__ import annotations

import json

from fk_adapters.results.records import RECORDS, Record
from fk_adapters.results.status import Kind


class NotResults(ValueError):
    """The file or object is not an fk results file (e.g. an engine process's own result.json, job.json, loads)."""


def kind_of(data) -> Kind | None:
    """The kind of a results file's content; None when it is not one."""
    if not isinstance(data, dict):
        return None
    if data.get("kind") in Kind._value2member_map_:
        return Kind(data["kind"])
    if isinstance(data.get("runs"), list):
        return Kind.RUNS
    if isinstance(data.get("scenarios"), list) and "engine" in data:
        return Kind.RUN
    if "slots" in data and "total_calls" in data and "scenario" in data:
        return Kind.CAPTURE
    return None


def from_dict(data, where: str = "the object") -> Record:
    """The typed record of a results file's content; NotResults when it is none."""
    kind = kind_of(data)
    if kind is None:
        raise NotResults(f"{where} is not an fk results file (no kind, and not the keys of one)")
    return RECORDS[kind].from_dict(data)


def as_record(results) -> Record:
    """``results`` as a record: a record as it is, a dict read as its kind."""
    return results if isinstance(results, Record) else from_dict(results)


def load(path: str) -> Record:
    """The record of the results file at ``path``."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return from_dict(data, path)
