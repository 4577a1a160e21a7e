import math

from fk_adapters import metrics


def test_first_divergence():
    assert metrics.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert metrics.first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert metrics.first_divergence([1, 2], [1, 2, 3]) == 2


def test_near_tie_accepts_only_mutual_top_k():
    base, cand = [5, 6, 7], [5, 8, 7]
    base_top = [[5], [6, 8, 1], [7]]
    cand_top = [[5], [8, 6], [7]]
    t = metrics.compare_tokens([base], [cand], [base_top], [cand_top])
    assert t["identical"] == 0 and t["near_ties"] == 1 and t["unexplained"] == []
    far = [[5], [6, 1, 2, 3, 4], [7]]  # the candidate's token is not in the baseline's top 5
    t = metrics.compare_tokens([base], [cand], [far], [cand_top])
    assert t["unexplained"] == [0] and t["first_divergence"] == [1]
    t = metrics.compare_tokens([base], [cand])  # no top-k recorded: a parting cannot be excused
    assert t["unexplained"] == [0]


def _run(tokens, teacher, top=None):
    return {"tokens": tokens, "teacher_logprobs": teacher, "token_top_ids": top}


def test_correctness_passes_within_and_fails_beyond_thresholds():
    base = _run([[1, 2, 3]], [[-1.0, -2.0, -3.0]])
    ok = metrics.correctness(base, _run([[1, 2, 3]], [[-1.0, -2.0005, -3.0]]), "float32")
    assert ok["passed"] and ok["teacher_forced"]["max_abs"] < 1e-3
    bad = metrics.correctness(base, _run([[1, 2, 3]], [[-1.0, -2.1, -3.0]]), "float32")
    assert not bad["passed"] and any("max" in f for f in bad["failures"])
    assert metrics.correctness(base, _run([[1, 2, 3]], [[-1.0, -2.1, -3.0]]), "bfloat16")["passed"]
    parted = metrics.correctness(base, _run([[1, 9, 3]], [[-1.0, -2.0, -3.0]]), "float32")
    assert not parted["passed"] and "part" in parted["failures"][0]


def test_no_teacher_positions_fails():
    res = metrics.correctness(_run([[1]], [[None]]), _run([[1]], [[None]]), "float32")
    assert not res["passed"] and res["teacher_forced"]["max_abs"] == math.inf


def test_ratio_and_spread():
    r = metrics.ratio([100.0, 110.0, 90.0], [110.0, 121.0, 99.0])
    assert math.isclose(r["ratio"], 1.1) and math.isclose(r["pair_min"], 1.1) and math.isclose(r["pair_max"], 1.1)
    s = metrics.spread([1.0, 2.0, 3.0])
    assert s["median"] == 2.0 and s["rel_spread"] == 1.0
    assert metrics.ratio([], [1.0]) == {"ratio": None}


def test_performance_shapes():
    base = {"throughput": {"w": [{"tokens_per_s": 10.0, "output_tokens_per_s": 5.0}]},
            "latency": {"b1": [{"latency_s": 2.0}]}}
    cand = {"throughput": {"w": [{"tokens_per_s": 20.0, "output_tokens_per_s": 10.0}]},
            "latency": {"b1": [{"latency_s": 1.0}]}}
    p = metrics.performance(base, cand)
    assert p["throughput"]["w"]["tokens_per_s"]["ratio"] == 2.0
    assert p["latency"]["b1"]["latency_s"]["ratio"] == 0.5
