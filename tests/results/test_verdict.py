"""The verdict policy of fk_adapters.results.verdict: what fails a scenario, a suite, a side-by-side run, a check."""
from fk_adapters.results import CheckStatus, ScenarioStatus, Verdict, verdict


def _row(name, status, slots=None):
    return {"scenario": name, "status": status,
            "evidence": {"slots": {s: {"plugin": "p", "status": st} for s, st in (slots or {}).items()}}}


def test_suite_fails_on_a_bad_scenario_a_modified_engine_and_an_unexercised_or_uncovered_slot():
    rows = [_row("a", ScenarioStatus.PASSED, {"rms": "exercised", "silu": "not exercised", "rope": "n/a"}),
            _row("b", ScenarioStatus.NOT_APPLICABLE, {"rope": "n/a"}),
            _row("c", ScenarioStatus.TIMEOUT, {"rope": "exercised"})]  # a failed run proves nothing
    cov = verdict.coverage(rows)
    assert cov["rope"]["exercised_in"] == [] and cov["rope"]["n/a_in"] == ["a", "b"]
    problems = verdict.suite_problems(rows, cov, ["vllm: modified"])
    assert problems == ["c: TIMEOUT", "vllm: modified", "slots never exercised in this suite: silu",
                        "slots no scenario of this suite has a layer for: rope (add a scenario that uses them, "
                        "or --allow-uncovered)"]
    assert verdict.suite_problems(rows[:2], cov, allow_unexercised=True, allow_uncovered=True) == []
    assert verdict.of_problems([]) is Verdict.PASS and verdict.of_problems(problems) is Verdict.FAIL


def test_side_by_side_passes_only_where_every_engine_passed():
    assert verdict.side_by_side(["PASS", "PASS"]) is Verdict.PASS
    assert verdict.side_by_side(["PASS", "FAIL"]) is Verdict.FAIL


def test_check_fails_on_a_wrong_or_crashed_slot_and_when_nothing_was_checked():
    slots = [{"plugin": "p", "slot": "rms", "workload": "w", "status": CheckStatus.NOT_OFFERED},
             {"plugin": "p", "slot": "silu", "workload": "w", "status": CheckStatus.INCORRECT}]
    assert verdict.check_problems(slots, lambda s: " at scale tiny") == ["p:silu (w): INCORRECT at scale tiny"]
    assert verdict.check_problems(slots[:1], lambda s: "") == [
        "no slot of the workloads has a kernel in the selected plugins"]
    assert verdict.check_slot(False) is CheckStatus.PASSED and verdict.check_slot(True) is CheckStatus.INCORRECT


def test_failed_engine_runs_and_later_rounds():
    assert verdict.failed_run(["ok", "timeout"]) is ScenarioStatus.TIMEOUT
    assert verdict.failed_run(["error"]) is ScenarioStatus.RUNTIME_ERROR
    assert verdict.after_rounds("PASSED", ["rms"]) is ScenarioStatus.NOT_EXERCISED
    assert verdict.after_rounds("INCORRECT", ["rms"]) == "INCORRECT"
