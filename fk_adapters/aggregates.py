"""FastKernels-style aggregates over an ``fk run`` results JSON.

The paper's rule (shared/reference/fastkernels-46.md): "per model geomean over workloads, blended 0.5 throughput /
0.5 latency; per category geomean; overall geomean over categories x correctness x coverage".

Direction: every figure here is a speedup, > 1 means the candidate is faster. A throughput ratio (candidate /
baseline items or tokens per s) is one as it stands; a latency ratio (candidate / baseline seconds) is inverted.

Definitions
-----------
scenario
    throughput = geomean of its throughput workloads' speedups, latency = geomean of its latency workloads'; blend =
    throughput^0.5 * latency^0.5 (a weighted geomean, like every other step), or the one side that was measured.
    One metric per throughput workload: the first of ``metrics.THROUGHPUT_KEYS`` it has (tokens/s and output
    tokens/s give the same ratio when lengths are fixed).
outcome
    "failed": the run did not give a valid candidate (RUNTIME_ERROR, TIMEOUT, LOAD_ERROR, or no correctness
    verdict); "incorrect": INCORRECT, INCONCLUSIVE or its correctness did not pass; "correct" otherwise (PASSED,
    NOT_EXERCISED, NOT_APPLICABLE).
covered
    at least one selected slot was exercised (runner evidence); None where no evidence was taken (A/A).
scored
    correct, not uncovered, not NOT_PROVEN (a declared kernel name could not prove its run), with a speedup, every
    workload of the scenario timed (not a run of some: ``fk run --workloads``), and timings not disturbed (another
    process on the GPU: ``perf.disturbed``, fk_adapters/gpu_share.py). Only scored scenarios enter the geomeans;
    the others count against the correctness and coverage factors instead (a model with a wrong or stock candidate
    has no speedup to claim).
category / overall
    category geomean over its scored scenarios; overall geomean over the categories that have one (each category
    weighs the same); score = overall x correctness x coverage, where correctness = correct / scenarios and
    coverage = covered / scenarios (left out of the product for an A/A run).
significance
    with 3 or more interleaved rounds: how many scored workloads' 95% intervals over rounds exclude 1, each way; with
    none, the report says the geomeans and the score are within the variation between engine processes (a plugin
    that changes nothing must not read as a speedup).
"""
from __future__ import annotations

from tabulate import tabulate

from fk_adapters import scenarios, stats, variation
from fk_adapters.check.runner import weighted_geomean
from fk_adapters.gpu_share import disturbed
from fk_adapters.metrics import THROUGHPUT_KEYS
from fk_adapters.results import ScenarioStatus as S, SlotEvidence as E

THROUGHPUT_WEIGHT = 0.5
UNCATEGORIZED = "uncategorized"
CORRECT, WRONG, FAILED = "correct", "incorrect", "failed"


def geomean(values) -> float | None:
    """Geometric mean of the positive finite values; None when there are none."""
    return weighted_geomean([(v, 1) for v in values if v is not None])


def blend(throughput: float | None, latency: float | None, w: float = THROUGHPUT_WEIGHT) -> float | None:
    """throughput^w * latency^(1 - w); the side present when the other is None."""
    if throughput is None or latency is None:
        return throughput if latency is None else latency
    return weighted_geomean([(throughput, w), (latency, 1.0 - w)])


def timed_ratios(perf: dict):
    """(kind, workload, ratio dict) per timed workload of a row's ``perf``: throughput's first of
    ``metrics.THROUGHPUT_KEYS`` with a ratio, latency's ``latency_s``."""
    for name, m in (perf or {}).get("throughput", {}).items():
        key = next((k for k in THROUGHPUT_KEYS if m.get(k, {}).get("ratio") is not None), None)
        if key:
            yield "throughput", name, m[key]
    for name, m in (perf or {}).get("latency", {}).items():
        if m.get("latency_s", {}).get("ratio") is not None:
            yield "latency", name, m["latency_s"]


def speedups(perf: dict) -> dict:
    """{"throughput": {workload: speedup}, "latency": {workload: speedup}} from a row's ``perf`` ratios."""
    out: dict = {"throughput": {}, "latency": {}}
    for kind, name, r in timed_ratios(perf):
        ratio = r["ratio"]
        out[kind][name] = ratio if kind == "throughput" else 1.0 / ratio if ratio else float("inf")
    return out


def significance(results: dict, rows: list[dict]) -> dict | None:
    """{"faster", "slower", "workloads"}: how many of the scored scenarios' workloads have a 95% interval over
    interleaved rounds (``variation.interval``) that excludes 1, each way; None when the run has no such intervals.
    Without any, the geomeans and the score are within the variation between engine processes."""
    if not variation.between_processes(results):
        return None
    out = {"faster": 0, "slower": 0, "workloads": 0}
    for row, agg in zip(results.get("scenarios", []), rows):
        if not agg["scored"]:
            continue
        for kind, _, r in timed_ratios(row.get("perf")):
            iv = variation.interval(r, results)
            if iv is None:
                continue
            out["workloads"] += 1
            if iv["lo"] > 1 or iv["hi"] < 1:
                out["faster" if (iv["lo"] > 1) == (kind == "throughput") else "slower"] += 1
    return out


def outcome(row: dict) -> str:
    """"correct", "incorrect" or "failed" (see the module docstring)."""
    if row.get("status") in (S.RUNTIME_ERROR, S.TIMEOUT, S.LOAD_ERROR) or "passed" not in row.get("correctness", {}):
        return FAILED
    if row.get("status") == S.INCORRECT or not row["correctness"]["passed"]:
        return WRONG
    return CORRECT


def _engine_own(ev: dict) -> bool:
    """A slot whose kernel is the engine's own (``evidence``'s mark; in results written before it, the label
    ``engine:SLOT`` that fk's own plugins give the engine's kernel handed back: fk-passthrough, fk-slow)."""
    return bool(ev.get("engine_own")) or str(ev.get("kernel", "")).startswith("engine:")


def claims_nothing(ev: dict) -> bool:
    """A slot whose kernel claims no speed for the plugin: the engine's own handed back, a library's, or, on a device,
    one that declares no kernel names (``evidence``'s marks)."""
    return _engine_own(ev) or bool(ev.get("kernel_library")) or bool(ev.get("unnamed"))


def ran_own_kernel(slots: dict) -> bool:
    """Whether any exercised slot of ``slots`` (a row's evidence) ran a kernel that claims speed for the plugin."""
    return any(e.get("status") == E.EXERCISED and not claims_nothing(e) for e in slots.values())


SUBSET = "only the workloads --workloads chose"


def unscored_why(row: dict, agg: dict, aa: bool = False, subset: bool = False) -> str:
    """Why a row has no speedup to claim ('' when it is scored): the candidate was not correct, ran no kernel of its
    own (none exercised, the slots all handed back to the engine's own kernels, a library's, or kernels declaring no
    names in a run on a device, or kernels proven in round 1 only),
    could not prove its kernels, timed only some of its workloads (``subset``: --workloads), measured no finite
    speedup on every workload, or was timed beside another process."""
    status, ev = row.get("status"), (row.get("evidence") or {}).get("slots") or {}
    if agg["outcome"] != CORRECT:
        return agg["outcome"]
    if status in (S.NOT_PROVEN, S.NOT_EXERCISED, S.NOT_APPLICABLE):
        return status.lower().replace("_", " ")
    if agg["covered"] is None and not aa:
        return "no kernel evidence"
    if agg["covered"] is False:
        return "no kernel of the plugin ran"
    ran = [e for e in ev.values() if e.get("status") == E.EXERCISED]
    if ran and all(_engine_own(e) for e in ran):
        return "the engine's own kernels"
    if ran and all(_engine_own(e) or e.get("kernel_library") for e in ran):
        return "a library's kernels, not the plugin's"
    if ran and not ran_own_kernel(ev):
        return "kernels that declare no names (on a device, not told from the engine's)"
    if subset:
        return SUBSET
    values = [*agg["throughput"].values(), *agg["latency"].values()]
    if agg["speedup"] is None or not all(stats.positive_finite(v) for v in values):
        return "no finite speedup on every workload"
    return "disturbed" if agg["disturbed"] else ""


def per_scenario(row: dict, aa: bool = False, subset: bool = False) -> dict:
    """Speedups, blend, correctness and kernel evidence of one results row (``aa``: of an A/A run; ``subset``: of a
    run that timed only the workloads --workloads chose)."""
    sp = speedups(row.get("perf", {}))
    tp, lat = geomean(sp["throughput"].values()), geomean(sp["latency"].values())
    slots = {s: e.get("status") for s, e in row.get("evidence", {}).get("slots", {}).items()}
    exercised = sum(st == E.EXERCISED for st in slots.values())
    applicable = sum(st != E.NOT_APPLICABLE for st in slots.values())
    out = {"scenario": row.get("scenario"), "status": row.get("status"), "outcome": outcome(row),
           "throughput": sp["throughput"], "latency": sp["latency"], "throughput_geomean": tp,
           "latency_geomean": lat, "speedup": blend(tp, lat),
           "correctness_failures": row.get("correctness", {}).get("failures", []),
           "covered": (exercised > 0) if "evidence" in row else None, "slots": slots, "exercised": exercised,
           "applicable": applicable,
           "calls": {s: e.get("calls", 0) for s, e in row.get("evidence", {}).get("slots", {}).items()},
           "disturbed": bool(disturbed(row))}
    out["unscored"] = unscored_why(row, out, aa, subset)
    out["scored"] = not out["unscored"]
    return out


def category_of(name: str) -> str:
    """The scenario's FastKernels category ([catalog] category), else "uncategorized"."""
    try:
        return scenarios.load(name).catalog.get("category") or UNCATEGORIZED
    except (scenarios.ScenarioError, OSError):
        return UNCATEGORIZED


def _fraction(k: int, n: int) -> float | None:
    return k / n if n else None


def summarize(results: dict, categories: dict[str, str] | None = None) -> dict:
    """Per scenario, per category and overall aggregates; ``categories`` overrides ``category_of`` by name."""
    aa = bool(results.get("aa"))
    rows = [per_scenario(r, aa, bool(results.get("workloads"))) for r in results.get("scenarios", [])]
    for r in rows:
        r["category"] = (categories or {}).get(r["scenario"]) or category_of(r["scenario"])
    cats = {}
    for name in sorted({r["category"] for r in rows}):
        members = [r for r in rows if r["category"] == name]
        scored = [r for r in members if r["scored"]]
        cats[name] = {"scenarios": len(members), "scored": len(scored),
                      "correct": sum(r["outcome"] == CORRECT for r in members),
                      "covered": sum(r["covered"] is True for r in members),
                      "throughput": geomean(r["throughput_geomean"] for r in scored),
                      "latency": geomean(r["latency_geomean"] for r in scored),
                      "speedup": geomean(r["speedup"] for r in scored)}
    n = len(rows)
    counts = {k: sum(r["outcome"] == k for r in rows) for k in (CORRECT, WRONG, FAILED)}
    correctness = _fraction(counts[CORRECT], n)
    coverage = None if aa else _fraction(sum(r["covered"] is True for r in rows), n)
    overall = geomean(c["speedup"] for c in cats.values())
    score = None
    if overall is not None and correctness is not None and variation.between_processes(results):
        score = overall * correctness * (1.0 if coverage is None else coverage)
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    return {"candidate": results.get("candidate"), "engine": results.get("engine"), "aa": aa, "scenarios": rows,
            "not_significant": variation.why_not(results), "significance": significance(results, rows),
            "categories": cats, "counts": dict(counts, scenarios=n, scored=sum(r["scored"] for r in rows)),
            "statuses": statuses,
            "overall": {"throughput": geomean(c["throughput"] for c in cats.values()),
                        "latency": geomean(c["latency"] for c in cats.values()), "speedup": overall,
                        "correctness": correctness, "coverage": coverage, "score": score}}


def _x(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _span(values) -> str:
    """[min, max] of the finite values: the spread behind a geomean."""
    vals = [v for v in values if v is not None and v == v and v not in (float("inf"), float("-inf"))]
    return f"[{min(vals):.3f}, {max(vals):.3f}]" if len(vals) > 1 else "-"


def markdown(summary: dict) -> str:
    """Scenario, category and overall tables (GitHub markdown)."""
    srows = [[r["scenario"], r["category"], r["status"], _x(r["throughput_geomean"]), _x(r["latency_geomean"]),
              _x(r["speedup"]), _span([*r["throughput"].values(), *r["latency"].values()]), r["outcome"],
              "-" if r["covered"] is None else f"{r['exercised']}/{r['applicable']}",
              "yes" if r["scored"] else f"no ({r['unscored']})" if r.get("unscored") else "no"]
             for r in summary["scenarios"]]
    blends = {}
    for r in summary["scenarios"]:
        if r["scored"]:
            blends.setdefault(r["category"], []).append(r["speedup"])
    crows = [[name, _x(c["throughput"]), _x(c["latency"]), _x(c["speedup"]), _span(blends.get(name, [])),
              f"{c['scored']}/{c['scenarios']}",
              f"{c['correct']}/{c['scenarios']}", "-" if summary["aa"] else f"{c['covered']}/{c['scenarios']}"]
             for name, c in summary["categories"].items()]
    o, k = summary["overall"], summary["counts"]
    pct = lambda v: "-" if v is None else f"{100 * v:.0f}%"  # noqa: E731
    lines = ["## Aggregates (FastKernels-style)", "",
             "Speedups: > 1 means the candidate is faster (latency ratios inverted). Per scenario the geomean over "
             "its workloads, blended 0.5 throughput / 0.5 latency (geometric); per category the geomean of its "
             "correct, covered scenarios; overall the geomean over categories.", "",
             tabulate(srows, headers=["scenario", "category", "status", "throughput", "latency", "blend",
                                      "workloads [min, max]", "outcome", "slots exercised", "scored"],
                      tablefmt="github", disable_numparse=True), "",
             tabulate(crows, headers=["category", "throughput", "latency", "blend", "scenarios [min, max]", "scored",
                                      "correct", "covered"], tablefmt="github", disable_numparse=True), "",
             f"- overall geomean: {_x(o['speedup'])} (throughput {_x(o['throughput'])}, latency {_x(o['latency'])})",
             f"- correctness: {pct(o['correctness'])} ({k[CORRECT]} correct, {k[WRONG]} incorrect, "
             f"{k[FAILED]} failed of {k['scenarios']})",
             f"- coverage: {pct(o['coverage'])}" + (" (A/A: not applicable)" if summary["aa"] else ""),
             "- score (overall x correctness x coverage): "
             + ("**not given** (not significant: next line)" if summary.get("not_significant") else _x(o["score"]))]
    if summary.get("not_significant"):
        lines += [f"- **not significant**: {summary['not_significant']}; these geomeans describe this one pair of "
                  "processes only, not a speedup"]
    sig = summary.get("significance")
    if sig and not sig["faster"] and not sig["slower"]:
        lines += [f"- **no significant change**: no scored workload's 95% interval over rounds excludes 1 "
                  f"({sig['workloads']} workload(s)); these geomeans and the score are within the variation between "
                  "engine processes"]
    elif sig:
        lines += [f"- significant (95% intervals over rounds excluding 1): {sig['faster']} workload(s) faster, "
                  f"{sig['slower']} slower, of {sig['workloads']} scored"]
    return "\n".join(lines) + "\n"
