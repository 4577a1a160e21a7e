"""The verdict policy: what each scenario's status is, and what fails a run, a side-by-side run or a check."""
from __future__ import annotations

from fk_adapters.results.status import CheckStatus, ScenarioStatus, SlotEvidence, Verdict

S, E = ScenarioStatus, SlotEvidence
OK_STATUSES = (S.PASSED, S.NOT_APPLICABLE)  # what does not fail a suite
ENGINE_FAILURES = (S.RUNTIME_ERROR, S.TIMEOUT)  # an engine run failed: no conclusion about the kernels


def failed_run(ended: list[str]) -> ScenarioStatus:
    """The status of a scenario whose engine runs ended (statuses of ``proc.run_job``) not all ok."""
    return S.TIMEOUT if "timeout" in ended else S.RUNTIME_ERROR


def wrong_or_unjudged(correctness: dict) -> ScenarioStatus:
    """A failed correctness verdict: INCORRECT, or INCONCLUSIVE where its float32 reference could not judge."""
    return S.INCONCLUSIVE if correctness.get("inconclusive") else S.INCORRECT


def aa_status(row: dict) -> ScenarioStatus:
    """An A/A scenario (the stock engine on both sides): PASSED unless something failed."""
    return S.PASSED if not row["failures"] else wrong_or_unjudged(row["correctness"])


def no_slot_applies(slots: dict) -> bool:
    """No selected slot has a layer that routes to the plugin: the candidate ran the stock model."""
    return bool(slots) and all(e["status"] == E.NOT_APPLICABLE for e in slots.values())


def _load_problem(ev: dict, loads: list[dict]) -> list[str]:
    """Why the plugins were not loaded everywhere the model ran ([] when they were)."""
    unloaded = [w["pid"] for w in ev["workers"] if not w["plugins_loaded"]]
    if ev["load_errors"]:
        return ev["load_errors"]
    if not loads:
        return ["no engine process reported loading the plugins"]
    if unloaded:
        return [f"worker process(es) {unloaded} did not record loading the plugins"]
    return []


def scenario(row: dict, loads: list[dict], allow_unexercised: bool) -> tuple[ScenarioStatus, list[str]]:
    """Status of a candidate that ran, and the failures it adds: loaded everywhere, kernels ran, outputs agree.
    NOT_APPLICABLE: outputs agree, but no layer the model built routes to a selected slot, so the candidate ran the
    stock model."""
    ev = row["evidence"]
    unloaded = _load_problem(ev, loads)
    if unloaded:
        return S.LOAD_ERROR, unloaded
    if not ev["slots"]:
        notes = sorted({n for rec in loads for n in rec.get("notes", [])})
        return S.NOT_EXERCISED, ["no kernel of the selected plugins was installed"
                                 + (f" ({'; '.join(notes)})" if notes else "")]
    if not row["correctness"]["passed"]:
        return wrong_or_unjudged(row["correctness"]), []
    unproven = [f"{s}: {e['proof']}" for s, e in ev["slots"].items() if e["status"] == E.NOT_PROVEN]
    if unproven:
        return S.NOT_PROVEN, [f"kernel names that cannot prove the kernel ran: {'; '.join(unproven)}"]
    if no_slot_applies(ev["slots"]):
        return S.NOT_APPLICABLE, []
    unexercised = [s for s, e in ev["slots"].items() if e["status"] == E.NOT_EXERCISED]
    if not any(e["status"] == E.EXERCISED for e in ev["slots"].values()):
        return S.NOT_EXERCISED, [f"none of the plugin's kernels ran (hooked, never called: {', '.join(unexercised)})"]
    if unexercised and not allow_unexercised:
        return S.NOT_EXERCISED, [f"not exercised: {', '.join(unexercised)}"]
    return (S.INCORRECT if row["failures"] else S.PASSED), []


def after_rounds(status: str, missed: list[str]) -> str:
    """A PASSED scenario whose kernels did not run in a later interleaved round is NOT_EXERCISED."""
    return S.NOT_EXERCISED if missed and status == S.PASSED else status


COVERAGE_KEYS = {E.EXERCISED: "exercised_in", E.NOT_EXERCISED: "not_exercised_in", E.NOT_PROVEN: "not_exercised_in"}


def coverage(rows: list[dict]) -> dict:
    """Per slot over the suite: in how many scenarios it was exercised (of those whose runs finished)."""
    cov: dict[str, dict] = {}
    for r in rows:
        if r["status"] in ENGINE_FAILURES:  # evidence as of a failure: no conclusion about the suite
            continue
        for slot, e in r.get("evidence", {}).get("slots", {}).items():
            c = cov.setdefault(slot, {"plugin": e["plugin"], "exercised_in": [], "not_exercised_in": [], "n/a_in": []})
            c[COVERAGE_KEYS.get(e["status"], "n/a_in")].append(r["scenario"])
    return cov


def suite_problems(rows: list[dict], cov: dict, engine_problems: list[str] = (), allow_unexercised: bool = False,
                   allow_uncovered: bool = False, aa: bool = False) -> list[str]:
    """What fails a suite: a scenario not OK, an engine that is not stock (``engine_integrity.problems``), a slot
    never exercised or with no layer in any scenario's model (``coverage``)."""
    never = sorted(s for s, c in cov.items() if not c["exercised_in"])
    uncovered = [s for s in never if not cov[s]["not_exercised_in"]]  # no scenario's model has a layer for it
    unexercised = [s for s in never if s not in uncovered]
    problems = [f"{r['scenario']}: {r['status']}" for r in rows if r["status"] not in OK_STATUSES]
    problems += engine_problems
    if unexercised and not allow_unexercised and not aa:
        problems.append(f"slots never exercised in this suite: {', '.join(unexercised)}")
    if uncovered and not allow_uncovered and not aa:
        problems.append(f"slots no scenario of this suite has a layer for: {', '.join(uncovered)} "
                        "(add a scenario that uses them, or --allow-uncovered)")
    return problems


def unfinished(done: int, total: int, items: str) -> list[str]:
    """A results file written before its last of ``total`` ``items`` is in (after each, so a cut-off run keeps what
    finished) fails: a run stopped there must never read as a pass."""
    return [] if done >= total else [f"unfinished: {done} of {total} {items} done (stopped, or still running)"]


def of_problems(problems: list[str]) -> Verdict:
    return Verdict.FAIL if problems else Verdict.PASS


def side_by_side(verdicts: list[str]) -> Verdict:
    """One candidate on several engines passes only where it passed on every engine."""
    return Verdict.PASS if all(v == Verdict.PASS for v in verdicts) else Verdict.FAIL


def check_slot(wrong_shapes: bool) -> CheckStatus:
    return CheckStatus.INCORRECT if wrong_shapes else CheckStatus.PASSED


def check_problems(slots: list[dict], failed_at) -> list[str]:
    """What fails an ``fk check``: a checked slot not PASSED, or no slot checked at all. ``failed_at(slot)``: the
    input scales its shapes failed at, as text."""
    bad = [f"{s['plugin']}:{s['slot']} ({s['workload']}): {s['status']}" + failed_at(s)
           for s in slots if s["status"] not in (CheckStatus.PASSED, CheckStatus.NOT_OFFERED)]
    if not any(s["status"] != CheckStatus.NOT_OFFERED for s in slots):
        bad.append("no slot of the workloads has a kernel in the selected plugins")
    return bad
