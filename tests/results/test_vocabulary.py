"""The vocabularies are the strings results files hold: equal, hashed, printed and dumped as those strings."""
import json

from tabulate import tabulate

from fk_adapters.results import CheckStatus, ScenarioStatus, SlotEvidence, Verdict


def test_a_member_is_its_string_everywhere():
    m = SlotEvidence.NOT_EXERCISED
    assert m == "not exercised" and f"{m}" == "not exercised" and str(m) == "not exercised"
    assert {"not exercised": 1}[m] == 1 and "not exercised" in {m}
    assert json.dumps({"s": m, "v": Verdict.FAIL}) == '{"s": "not exercised", "v": "FAIL"}'
    assert "n/a" in tabulate([[SlotEvidence.NOT_APPLICABLE]])


def test_every_committed_spelling_is_a_member():
    assert [s.value for s in ScenarioStatus] == ["PASSED", "INCORRECT", "INCONCLUSIVE", "NOT_EXERCISED", "LOAD_ERROR",
                                                 "RUNTIME_ERROR", "TIMEOUT", "NOT_APPLICABLE", "NOT_PROVEN"]
    assert {"exercised", "not exercised", "not proven", "n/a", "not judged"} <= {e.value for e in SlotEvidence}
    assert {"PASSED", "INCORRECT", "NOT_OFFERED", "RUNTIME_ERROR", "TIMEOUT"} == {c.value for c in CheckStatus}
