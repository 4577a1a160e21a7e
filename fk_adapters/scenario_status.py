"""What has been measured of each scenario: read back from the results fk wrote.

Three kinds of file count: ``results.json`` of ``fk run`` (did the engine start and serve it, at
what rate: tokens/s, or items/s for models without tokens, and the plugin's verdict), the workload files of
``fk capture`` (the slots its run exercised, with call counts) and its ``*.failed.json`` (why the engine could not
serve it). The newest file per (scenario, engine) sets the status; each plugin's newest run gives its verdict.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from fk_adapters import aggregates, metrics, results_files, variation
from fk_adapters.gpu_share import disturbed
from fk_adapters.results import Capture, CaptureFailure, Kind, RunResults, ScenarioStatus as S
from fk_adapters.results.verdict import OK_STATUSES
from fk_adapters.scenarios import requests_divisor


@dataclass
class Seen:
    """The newest facts about one scenario in one engine."""
    status: str = ""  # "runs" or "fails: <reason>"
    created: str = ""
    source: str = ""
    figures: list[str] = field(default_factory=list)
    slots: dict[str, int] = field(default_factory=dict)
    slots_created: str = ""
    rate: str = ""  # the newest run's measured rate
    verdicts: dict[str, tuple[str, str]] = field(default_factory=dict)  # plugin -> (created, its newest verdict)
    served: str = ""  # the rate the newest capture's own run served at (eager, recorder on): not a speed figure


def _first_line(text) -> str:
    return str(text or "").strip().splitlines()[0][:160] if str(text or "").strip() else "no reason recorded"


RATES = (("tokens_per_s", "tok/s"), ("items_per_s", "items/s"))  # LLMs; models without tokens


def _first_rate(throughput: dict, median) -> tuple[float, str, str] | None:
    """(median, unit, workload) of the first throughput workload that has a rate, in tokens/s or items/s;
    ``median(workload, key)`` reads it out of that file's shape."""
    for name, w in (throughput or {}).items():
        for key, unit in RATES:
            value = median(w, key)
            if value:
                return value, unit, name
    return None


def _rate(row: dict) -> str | None:
    """The baseline's median throughput of the first workload that has one (an ``fk run`` row)."""
    found = _first_rate((row.get("perf") or {}).get("throughput"),
                        lambda w, key: ((w.get(key) or {}).get("baseline") or {}).get("median"))
    return f"{found[0]:.3g} {found[1]} ({found[2]})" if found else None


def _served(capture_path: str, engine: str) -> str:
    """The median rate of the first workload that the capture's own run (``<engine>-run/result.json`` beside
    it) served, or ""."""
    try:
        with open(os.path.join(os.path.dirname(capture_path), f"{engine}-run", "result.json")) as f:
            res = json.load(f)
    except (OSError, ValueError):
        return ""
    found = _first_rate((res.get("perf") or {}).get("throughput"), lambda repeats, key: metrics.spread(
        [r[key] for r in repeats if isinstance(r, dict) and r.get(key)]).get("median"))
    how = "served in fk capture: eager, every slot call recorded"
    return f"{found[0]:.3g} {found[1]} ({found[2]}, {how})" if found else ""


def _from_run(res: RunResults, path: str, into: dict) -> None:
    engine, created = res.engine or "?", res.created
    for row in res.scenarios:
        seen = into.setdefault((row.get("scenario"), engine), Seen())
        plugin = res.candidate
        if row.get("status") and plugin and created >= seen.verdicts.get(plugin, ("",))[0]:
            seen.verdicts[plugin] = (created, f"{plugin}: {_plugin_figure(row, res)}")
        if created < seen.created:
            continue
        base = row.get("baseline") or {}
        ok = base.get("status") == "ok"
        seen.status = "runs" if ok else f"fails: {_first_line(base.get('error') or base.get('status'))}"
        seen.created, seen.source, seen.figures = created, path, []
        rate = seen.rate = _rate(row) or ""
        if rate:
            shared = " (disturbed: the GPU was shared)" if disturbed(row) else ""
            seen.figures.append(f"{rate} on {res.device or '?'}{shared}")


def _plugin_figure(row: dict, res: RunResults) -> str:
    """The plugin's verdict and blended speed where it has one to claim (``aggregates.unscored_why``); a run where
    none of its kernels ran says so instead, an A/A run claims no speed, and a single pair of processes says that
    its figure is within the variation between engine processes."""
    per = aggregates.per_scenario(row, res.aa, bool(res.workloads))
    if per["covered"] is False and row["status"] in OK_STATUSES:
        why = f"no layer of the model routes to {', '.join(per['slots'])}" if per["applicable"] == 0 else (
            "none of its kernels was called")
        return f"not exercised: ran the stock model ({why})"
    if res.aa:
        return f"{verdict(row)} (stock against stock: no speed claimed)"
    if per["unscored"] and per["unscored"] not in (aggregates.WRONG, aggregates.FAILED):
        return f"{verdict(row)} (no speed claimed: {per['unscored']})"
    judged = verdict(row)
    if not per["scored"] or judged.startswith(S.INCONCLUSIVE):  # wrong, failed or unjudged: no speed to claim
        return judged
    quick, single = res.quick, variation.why_not(res)
    how = "".join((f", 1/{requests_divisor(quick)} of the requests, one throughput repeat" if quick else "",
                   "; one engine process a side: not significant" if single else ""))
    return f"{judged} at {per['speedup']:.3g}x the stock speed (blend{how})"


def verdict(row: dict) -> str:
    """A run's status, saying what judged a pass or fail: a float32 run (bf16/fp16 and an engine's float32 tokens),
    a float64 forward (float32 outputs), or the fixed thresholds alone."""
    status, c = row["status"], row.get("correctness") or {}
    up = metrics.reference_dtype(c.get("dtype", "")) if c.get("kind") == "outputs" else "float32"
    if status == S.INCONCLUSIVE:
        return f"{status} (the float32 run {c.get('inconclusive', 'could not judge')})"
    if status not in (S.PASSED, S.INCORRECT):
        return status
    blind = metrics.reference_blind(c["reference"]["tokens"]) if "tokens" in c.get("reference", {}) else ""
    if c.get("kind") == "outputs" and status == S.PASSED:
        blind = metrics.outputs_blind(c)
    if blind:  # a run from before fk's rule (reference_blind, outputs_blind), judged again by it
        return f"INCONCLUSIVE (was {status}; fk's later rule: the float32 run {blind})"
    if c.get("reference_error"):
        return f"{status} (fixed thresholds; no {up} reference could be made)"
    if c.get("reference") and c["reference"].get("tensors", 1):
        return f"{status} (against a {up} {'forward' if up == 'float64' else 'run'})"
    if status == S.INCORRECT and c.get("dtype") in ("bfloat16", "float16") and "fixed" not in c:
        return f"{status} (fixed thresholds; run before fk's float32 check)"
    return status


def _from_capture(res: Capture, path: str, into: dict) -> None:
    seen = into.setdefault((res.scenario, res.engine or "?"), Seen())
    created = res.created
    if created < seen.slots_created:
        return
    seen.slots = {slot: sum(s.get("calls", 0) for s in sigs) for slot, sigs in res.slots.items()}
    seen.slots_created = created
    seen.served = _served(path, res.engine or "?")
    if created >= seen.created:  # the newest file says whether it runs
        seen.status, seen.created, seen.source = "runs", created, path


def _from_failure(res: CaptureFailure, path: str, into: dict) -> None:
    seen = into.setdefault((res.scenario, res.engine or "?"), Seen())
    if res.created >= seen.created:
        seen.status, seen.created, seen.source = f"fails: {_first_line(res.error)}", res.created, path


def collect(roots: list[str]) -> dict[tuple[str, str], Seen]:
    """{(scenario, engine): Seen} from every results file under ``roots``."""
    found: dict[tuple[str, str], Seen] = {}
    readers = {Kind.RUN: _from_run, Kind.CAPTURE: _from_capture, Kind.CAPTURE_FAILURE: _from_failure}
    for path, rec in results_files.records(roots):
        if rec.kind in readers:
            readers[rec.kind](rec, path, found)
    for seen in found.values():  # a capture's rate stands in only where no run measured one
        if seen.served and not seen.rate:
            seen.figures.append(seen.served)
        seen.figures += [text for _, (_, text) in sorted(seen.verdicts.items())]
    return found
