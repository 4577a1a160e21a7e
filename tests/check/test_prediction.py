"""A check's whole-run prediction: slot speedups weighted by the capture's device-time shares, the rest as stock."""
from fk_adapters.check import prediction
from fk_adapters.check.report import render_check

WORKLOAD = {"scenario": "w", "profile": {"kernel_us": {"gemm_k": 80.0, "norm_k": 10.0, "attn_k": 8.0, "x": 2.0},
                                         "slot_us": {"gemm": 80.0, "rms_norm": 10.0, "paged_attention": 8.0}}}


def _entry(plugin, slot, speedup, status="PASSED"):
    return {"workload": "w", "plugin": plugin, "slot": slot, "status": status, "predicted_speedup": speedup}


def test_the_run_is_predicted_from_the_shares_and_unchecked_slots_are_named_as_stock():
    """Session 48 by hand: gemm 84% at 0.958 and the small slots predicted 0.966; the A/B's geomean was 0.969."""
    slots = [_entry("t", "gemm", 0.8), _entry("t", "rms_norm", 2.0),
             {"workload": "w", "plugin": "t", "slot": "silu_and_mul", "status": "NOT_OFFERED"}]
    (p,) = prediction.run_predictions(slots, [WORKLOAD])
    assert abs(p["speedup"] - 1 / (0.8 / 0.8 + 0.1 / 2.0 + 0.1)) < 1e-12  # 0.8 + 0.1 (the rest) stock
    assert p["weighed"] == {"gemm": 0.8, "rms_norm": 0.1} and p["as_stock"] == {"paged_attention": 0.08}
    assert p["rest_as_stock"] == 0.02 and p["not_passed"] == []
    text = render_check({"kind": "check", "schema_version": 1, "slots": slots, "run_predictions": [p]})
    assert "## The run this predicts" in text and "| 0.870 " in text and "paged_attention 8.0%" in text


def test_a_slot_that_did_not_pass_leaves_no_prediction_and_no_profile_no_row():
    slots = [_entry("t", "gemm", 0.8), _entry("t", "rms_norm", None, status="INCORRECT")]
    (p,) = prediction.run_predictions(slots, [WORKLOAD])
    assert p["speedup"] is None and p["not_passed"] == ["rms_norm"]
    assert prediction.run_predictions(slots, [{"scenario": "w", "slots": {}}]) == []
