"""How far one side's own engine processes agree on their greedy streams."""
from fk_adapters import stream_agreement


def _runs(*streams):
    return [{"tokens": s} for s in streams]


def test_a_first_process_that_parts_from_the_later_ones_is_reported():
    """Session 43: vLLM's cold first stock process agreed with later ones on 17 of 32 streams."""
    a, b = [1, 2, 3, 4], [1, 2, 9, 9]
    runs = {"baseline": _runs(a, b, b), "candidate": _runs(b, b, b)}
    assert stream_agreement.findings(runs) == [
        "greedy streams identical to the same side's round 1, over the later rounds' engine processes: baseline 2 of "
        "4, candidate 4 of 4 (how far the engine's own processes agree: a reading for the baseline / candidate "
        "streams)"]


def test_nothing_is_said_when_every_process_agrees_or_some_made_no_tokens():
    a = [1, 2]
    assert stream_agreement.findings({"baseline": _runs(a, a), "candidate": _runs(a, a)}) == []
    assert stream_agreement.findings({"baseline": _runs(a), "candidate": _runs(a)}) == []  # one round
    assert stream_agreement.findings({"baseline": [{"tokens": a}, {}], "candidate": _runs(a, [3, 4])}) == []
