"""Typed records of fk's results files: the top-level fields typed, nested detail (scenario rows, slots, shapes)
kept as the dicts the file holds. Keys a record does not type are kept in ``extra``, and the file's key order is
kept, so ``Record.from_dict(d).to_dict() == d``."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fk_adapters.results.status import Kind

SCHEMA_VERSION = 1  # files written before fk stamped one read as version 0
_OWN = ("schema_version", "extra", "keys")


def stamp(kind: Kind) -> dict:
    """The keys every results file fk writes starts with."""
    return {"schema_version": SCHEMA_VERSION, "kind": kind.value}


@dataclass
class Record:
    kind: ClassVar[Kind]
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict, repr=False)  # keys this record does not type
    keys: tuple[str, ...] | None = field(default=None, repr=False, compare=False)  # the file's key order

    @classmethod
    def typed(cls) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(cls) if f.name not in _OWN]

    @classmethod
    def from_dict(cls, data: dict) -> Record:
        names = {f.name for f in cls.typed()}
        values = {k: cls._field_from(k, v) for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names and k not in ("kind", "schema_version")}
        return cls(schema_version=data.get("schema_version", 0), extra=extra, keys=tuple(data), **values)

    @classmethod
    def _field_from(cls, name: str, value):
        return value

    def to_dict(self) -> dict:
        """The file's content: its keys in their order, then any typed field set since (not at its default)."""
        typed = {f.name: f for f in self.typed()}
        keys = list(self.keys) if self.keys is not None else ["schema_version", "kind", *typed]
        out = {}
        for k in keys:
            if k == "kind":
                out[k] = self.kind.value
            elif k == "schema_version":
                out[k] = self.schema_version
            elif k in typed:
                out[k] = _plain(getattr(self, k))
            elif k in self.extra:
                out[k] = self.extra[k]
        out.update({k: v for k, v in self.extra.items() if k not in out})
        out.update({k: _plain(getattr(self, k)) for k, f in typed.items() if k not in out and not _at_default(self, f)})
        return out


def _plain(value):
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _at_default(rec: Record, f: dataclasses.Field) -> bool:
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return getattr(rec, f.name) == default


@dataclass
class EngineResults(Record):
    """What every results file of an engine's run says first: which fk, engine and machine, and how it ran."""
    fk_version: str = ""
    created: str = ""
    command: str = ""
    engine: str = ""
    engine_version: str = ""
    device: str = ""
    host: str = ""
    gpus: list[str] = field(default_factory=list)  # the GPU models the run could see (nvidia-smi), one per device


@dataclass
class RunResults(EngineResults):
    """``fk run`` on one engine: results.json."""
    kind: ClassVar[Kind] = Kind.RUN
    mode: str = ""
    mode_detail: str = ""
    candidate: str = ""
    plugins: list[str] = field(default_factory=list)
    aa: bool = False
    quick: bool | int = False
    correctness_only: bool = False
    warmup_share: float = 1.0  # --warmup-share: the share of each throughput workload its warm-up pass served
    workloads: list[str] = field(default_factory=list)  # --workloads: the only workloads timed (empty: all)
    baseline_from: str = ""
    reference_from: str = ""
    interleave: int = 1
    engine_integrity: dict = field(default_factory=dict)
    tuning_env: dict = field(default_factory=dict)  # runner.ab.engine_tuning_env: inherited, and set for both sides
    cpu_binding: str = ""  # CUDA runs: $FK_BIND_CPUS as the run had it ("1" the default, "0" off, "gpu")
    thresholds: dict = field(default_factory=dict)
    output_thresholds: dict = field(default_factory=dict)
    scenarios: list[dict] = field(default_factory=list)  # one row per scenario (status, correctness, perf, ...)
    coverage: dict = field(default_factory=dict)
    verdict: str = ""
    problems: list[str] = field(default_factory=list)
    noise_floor: dict | None = None  # an A/A run's
    # --with-aa: {"results": the A/A of the same rounds (a path beside this file), "noise_floor": its floor}
    with_aa: dict | None = None
    wall_s: float | None = None  # this invocation's wall time (scenarios kept from an interrupted run not included)


@dataclass
class SideBySide(Record):
    """``fk run`` of one candidate on several engines: each engine's results, side by side."""
    kind: ClassVar[Kind] = Kind.RUNS
    engines: list[str] = field(default_factory=list)
    candidate: str = ""
    verdict: str = ""
    engine_integrity: dict = field(default_factory=dict)
    runs: list[RunResults] = field(default_factory=list)

    @classmethod
    def _field_from(cls, name: str, value):
        return [RunResults.from_dict(r) for r in value] if name == "runs" else value


@dataclass
class CheckResults(EngineResults):
    """``fk check``: results.json, one entry per (workload, plugin, slot)."""
    kind: ClassVar[Kind] = Kind.CHECK
    config: dict = field(default_factory=dict)
    workloads: list[str] = field(default_factory=list)
    slots: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    verdict: str = ""
    run_predictions: list[dict] = field(default_factory=list)  # check/prediction.py (none before session 48)


@dataclass
class Capture(EngineResults):
    """An ``fk capture`` workload file: the slot calls an engine made serving a scenario."""
    kind: ClassVar[Kind] = Kind.CAPTURE
    scenario: str = ""
    dtype: str = ""
    mode: str = ""
    quick: bool | int = False
    weights: str = ""
    model: dict = field(default_factory=dict)
    workers: int = 0
    engine_integrity: dict = field(default_factory=dict)
    total_calls: dict[str, int] = field(default_factory=dict)
    slots: dict[str, list[dict]] = field(default_factory=dict)  # {slot: [signature entry, ...]}


@dataclass
class CaptureFailure(EngineResults):
    """``fk capture``: an engine could not serve the scenario, and why."""
    kind: ClassVar[Kind] = Kind.CAPTURE_FAILURE
    scenario: str = ""
    error: str = ""


@dataclass
class CompareResults(Record):
    """``fk compare``'s JSON output."""
    kind: ClassVar[Kind] = Kind.COMPARE
    verdict: str = ""
    verdict_line: str = ""
    summary: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    uncompared: list[str] = field(default_factory=list)
    base: dict = field(default_factory=dict)
    head: dict = field(default_factory=dict)
    threshold: float = 0.0
    max_margin: float = 0.0
    noise_floor: dict | None = None
    margin: float = 0.0
    conf: float = 0.0
    methods: list[str] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    only_base: list[str] = field(default_factory=list)
    only_head: list[str] = field(default_factory=list)
    scenarios: list[dict] = field(default_factory=list)
    perf: list[dict] = field(default_factory=list)


@dataclass
class CoverageReport(Record):
    """``fk coverage``'s JSON output."""
    kind: ClassVar[Kind] = Kind.COVERAGE
    fk_version: str = ""
    command: str = ""
    captures: list[dict] = field(default_factory=list)
    uncovered_ranking: list = field(default_factory=list)


RECORDS: dict[Kind, type[Record]] = {r.kind: r for r in (RunResults, SideBySide, CheckResults, Capture,
                                                          CaptureFailure, CompareResults, CoverageReport)}
