"""Every results file committed under reports/ loads through fk_adapters.results as the record of its kind."""
import json
import os
import subprocess

import pytest

from fk_adapters import results
from fk_adapters.engines.driver_common import PARTIAL_FILE
from fk_adapters.results import Kind

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# an engine process's own (processes.json: excerpts of several, reports/gpu/s57-h100): not results
ENGINE_FILES = ("job.json", "result.json", "gpu_share.json", PARTIAL_FILE, "processes.json")


def committed_json() -> list[str]:
    out = subprocess.run(["git", "ls-files", "reports"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in out.split() if p.endswith(".json")]


def expected_kind(path: str) -> Kind | None:
    """What the file is, told from where fk writes it (not from its keys: the loader does that)."""
    name, parts = os.path.basename(path), path.split("/")
    if name in ENGINE_FILES or "loads" in parts or "probe" in parts:
        return None
    if name == "compare.json":
        return Kind.COMPARE
    if name == "coverage.json":
        return Kind.COVERAGE
    if name == "results.json":
        if any(p.startswith("check") for p in parts):
            return Kind.CHECK
        return Kind.RUNS if path == "reports/gpu/sglang-0.5.15-h100/both/results.json" else Kind.RUN
    if name.removesuffix(".json") in ("vllm", "sglang", "transformers"):
        return Kind.CAPTURE  # <scenario>/<engine>.json beside <engine>-run/
    if name.removesuffix(".failed.json") in ("vllm", "sglang", "transformers"):
        return Kind.CAPTURE_FAILURE  # <scenario>/<engine>.failed.json: the engine could not serve it
    raise AssertionError(f"a committed JSON file this test does not know: {path}")


PATHS = committed_json()


def test_the_committed_files_are_found():
    assert len(PATHS) > 100
    kinds = {expected_kind(p) for p in PATHS}
    assert {Kind.RUN, Kind.RUNS, Kind.CHECK, Kind.CAPTURE, Kind.COMPARE} <= kinds


@pytest.mark.parametrize("path", PATHS)
def test_every_committed_json_loads_as_its_kind_and_round_trips(path):
    want = expected_kind(path)
    full = os.path.join(ROOT, path)
    if want is None:
        with pytest.raises(results.NotResults):
            results.load(full)
        return
    rec = results.load(full)
    assert rec.kind is want
    assert isinstance(rec, results.records.RECORDS[want])
    with open(full) as f:
        data = json.load(f)
    assert json.dumps(rec.to_dict()) == json.dumps(data)  # same keys, values and order
    assert rec.schema_version == data.get("schema_version", 0)


def test_side_by_side_runs_are_typed_records():
    rec = results.load(os.path.join(ROOT, "reports/gpu/sglang-0.5.15-h100/both/results.json"))
    assert [r.kind for r in rec.runs] == [Kind.RUN, Kind.RUN]
    assert {r.engine for r in rec.runs} == {"vllm", "sglang"}


def test_written_files_carry_kind_and_schema_version_and_unknown_keys_survive():
    fresh = {**results.stamp(Kind.CHECK), "engine": "vllm", "slots": [], "a_later_key": {"x": 1}}
    rec = results.from_dict(fresh)
    assert rec.kind is Kind.CHECK and rec.schema_version == results.SCHEMA_VERSION
    assert rec.extra == {"a_later_key": {"x": 1}} and rec.to_dict() == fresh
    built = results.RunResults(engine="vllm", verdict=results.Verdict.PASS)
    assert built.to_dict()["kind"] == "run" and built.to_dict()["schema_version"] == results.SCHEMA_VERSION


def test_an_explicit_kind_wins_over_the_keys():
    # fk compare's output holds "scenarios" and a verdict, like a run: its kind says what it is
    assert results.kind_of({"kind": "compare", "scenarios": [], "engine": "x"}) is Kind.COMPARE
    assert results.kind_of({"scenarios": [], "engine": "x"}) is Kind.RUN
    assert results.kind_of({"status": "ok", "engine": "vllm", "perf": {}}) is None
