import math

import pytest

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


def _save(path, tensors):
    from safetensors.torch import save_file

    save_file(tensors, str(path))
    return str(path)


def test_output_diffs_pass_rounding_and_fail_beyond_thresholds(tmp_path):
    import torch

    g = torch.Generator().manual_seed(0)
    out = {"last_hidden_state": torch.randn(2, 5, 16, generator=g), "pooler_output": torch.randn(2, 16, generator=g)}
    base = _save(tmp_path / "b.safetensors", out)
    same = metrics.output_correctness(base, base, "float32")
    assert same["passed"] and same["kind"] == "outputs" and same["worst"] == {"max_abs": 0.0, "rel_mean": 0.0,
                                                                                "min_cosine": 1.0}
    noisy = {k: v * (1 + 1e-6 * torch.randn(v.shape, generator=g)) for k, v in out.items()}
    res = metrics.output_correctness(base, _save(tmp_path / "n.safetensors", noisy), "float32")
    assert res["passed"] and 0 < res["worst"]["rel_mean"] < 1e-5 and set(res["outputs"]) == set(out)
    scaled = dict(out, pooler_output=out["pooler_output"] * 1.05)  # a 5% scale error: cosine stays 1, rel_mean not
    res = metrics.output_correctness(base, _save(tmp_path / "s.safetensors", scaled), "float32")
    assert not res["passed"] and res["failures"] == [
        f"pooler_output: mean |Δ| / mean |baseline| {res['outputs']['pooler_output']['rel_mean']:.3g} > 0.0001"]
    assert res["outputs"]["last_hidden_state"]["max_abs"] == 0.0
    assert metrics.output_correctness(base, _save(tmp_path / "s2.safetensors", scaled), "bfloat16")["passed"] is False
    flipped = dict(out, pooler_output=-out["pooler_output"])
    res = metrics.output_correctness(base, _save(tmp_path / "f.safetensors", flipped), "bfloat16")
    assert any("cosine similarity -1.000000" in f for f in res["failures"])


def test_output_diffs_fail_on_shape_missing_tensor_and_nan(tmp_path):
    import torch

    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    base = _save(tmp_path / "b.safetensors", {"logits": x, "pred_boxes": x[:2].clone()})
    res = metrics.output_correctness(base, _save(tmp_path / "c.safetensors", {"logits": x.reshape(4, 3).clone()}),
                                     "float32")
    assert not res["passed"]
    assert res["failures"][0] == "outputs only one side has: pred_boxes"
    assert res["failures"][1] == "logits: shape [4, 3] != baseline [3, 4]"
    nan = x.clone()
    nan[0, 0] = float("nan")
    res = metrics.output_correctness(base, _save(tmp_path / "n.safetensors",
                                                 {"logits": nan, "pred_boxes": x[:2].clone()}), "float32")
    assert res["failures"] == ["logits: non-finite differences (NaN or inf on one side only)"]
    both_nan = _save(tmp_path / "bn.safetensors", {"logits": nan})
    assert metrics.output_correctness(both_nan, both_nan, "float32")["passed"]  # NaN where the baseline has NaN
    empty = _save(tmp_path / "e.safetensors", {})
    assert metrics.output_correctness(empty, empty, "float32")["failures"] == ["no output tensors to compare"]


def test_performance_of_items_per_second():
    base = {"throughput": {"batch4": [{"elapsed_s": 1.0, "items": 8, "items_per_s": 8.0}]},
            "latency": {"batch4": [{"latency_s": 0.5}]}}
    cand = {"throughput": {"batch4": [{"elapsed_s": 0.5, "items": 8, "items_per_s": 16.0}]},
            "latency": {"batch4": [{"latency_s": 0.25}]}}
    p = metrics.performance(base, cand)
    assert set(p["throughput"]["batch4"]) == {"items_per_s"}
    assert p["throughput"]["batch4"]["items_per_s"]["ratio"] == 2.0
    assert p["latency"]["batch4"]["latency_s"]["ratio"] == 0.5
    assert set(metrics.performance({"throughput": {"w": []}}, {})["throughput"]["w"]) == {"tokens_per_s",
                                                                                      "output_tokens_per_s"}


def _bf16_run(ref, g, scale=1.0, bias=0.0):
    """ref run through a noisy bf16-like path: noise of 3% (of mean |ref|), an optional systematic error."""
    import torch

    return (ref * scale + bias + 0.03 * ref.abs().mean() * torch.randn(ref.shape, generator=g)).bfloat16()


def test_bf16_outputs_are_judged_against_the_float32_reference(tmp_path):
    import torch

    g = torch.Generator().manual_seed(0)
    ref = {"last_hidden_state": torch.randn(2, 50, 64, generator=g), "pooler_output": torch.randn(2, 64, generator=g)}
    refp = _save(tmp_path / "r.safetensors", ref)
    base = _save(tmp_path / "b.safetensors", {k: _bf16_run(v, g) for k, v in ref.items()})
    # a correct kernel: as far from the float32 truth as the engine, yet as far from the baseline as bf16 noise, which
    # the fixed bf16 thresholds (2e-2) fail
    good = _save(tmp_path / "g.safetensors", {k: _bf16_run(v, g) for k, v in ref.items()})
    assert not metrics.output_correctness(base, good, "bfloat16")["passed"]
    res = metrics.output_correctness(base, good, "bfloat16", refp)
    assert res["passed"], res["failures"]
    r = res["outputs"]["last_hidden_state"]["reference"]
    assert 0.9 < r["ratio_mean_abs"] < 1.1 and r["allowed_ratio_mean_abs"] == metrics.REF_RATIO + 4.0 / math.sqrt(6400)
    assert res["outputs"]["last_hidden_state"]["rel_mean"] > 0.02  # the plain diffs are still reported
    assert res["reference"]["tensors"] == 2 and 0.9 < res["worst"]["ratio_mean_abs"] < 1.2
    assert res["worst"]["err_b_rel"] == pytest.approx(0.024, rel=0.25)
    # the engine's own kernel (passthrough): err_c == err_b exactly
    same = metrics.output_correctness(base, base, "bfloat16", refp)
    assert same["passed"] and same["worst"]["ratio_mean_abs"] == 1.0 and same["worst"]["ratio_max_abs"] == 1.0
    # a systematic 5% error on top of the same noise fails, with the numbers in the message
    wrong = _save(tmp_path / "w.safetensors", {k: _bf16_run(v, g, scale=1.05) for k, v in ref.items()})
    res = metrics.output_correctness(base, wrong, "bfloat16", refp)
    assert not res["passed"] and res["worst"]["ratio_mean_abs"] > 1.5
    assert res["failures"][0].startswith("last_hidden_state: mean |candidate - float32 reference| ")
    assert "x the baseline's" in res["failures"][0]


def test_reference_max_catches_a_localised_error_and_small_tensors_get_slack(tmp_path):
    import torch

    g = torch.Generator().manual_seed(1)
    ref = torch.randn(4, 100, 64, generator=g)
    refp = _save(tmp_path / "r.safetensors", {"x": ref})
    base = _save(tmp_path / "b.safetensors", {"x": _bf16_run(ref, g)})
    spot = _bf16_run(ref, g)
    spot[0, 0, :4] += 1.0  # 4 of 25600 elements wrong: the mean barely moves, the max does
    res = metrics.output_correctness(base, _save(tmp_path / "s.safetensors", {"x": spot}), "bfloat16", refp)
    r = res["outputs"]["x"]["reference"]
    assert r["ratio_mean_abs"] < r["allowed_ratio_mean_abs"] and r["ratio_max_abs"] > metrics.REF_RATIO_MAX
    assert res["failures"] == [f"x: max |candidate - float32 reference| {r['err_c_max_abs']:.3g} > 2.5 x the "
                               f"baseline's {r['err_b_max_abs']:.3g}"]
    small = metrics._against_reference(ref[0, 0, :16], ref[0, 0, :16] + 0.01, ref[0, 0, :16] + 0.012, "bfloat16")
    assert small["allowed_ratio_mean_abs"] == metrics.REF_RATIO + 1.0  # 16 elements: 4 / sqrt(16)
    assert small["ratio_mean_abs"] == pytest.approx(1.2)


def test_float32_outputs_are_judged_against_the_float64_reference(tmp_path):
    import torch

    g = torch.Generator().manual_seed(3)
    ref = {"pred_masks": torch.randn(2, 50, 64, generator=g, dtype=torch.float64)}
    refp = _save(tmp_path / "r.safetensors", ref)

    def run(scale=1.0):  # a deep float32 forward: 5e-4 of rounding noise, its own summation order each time
        return {k: (v * scale + 5e-4 * v.abs().mean() * torch.randn(v.shape, generator=g)).float()
                for k, v in ref.items()}
    base = _save(tmp_path / "b.safetensors", run())
    good = _save(tmp_path / "g.safetensors", run())
    assert not metrics.output_correctness(base, good, "float32")["passed"]  # 2-layer thresholds: 7e-4 > 1e-4
    res = metrics.output_correctness(base, good, "float32", refp)
    assert res["passed"], res["failures"]
    assert res["reference"]["dtype"] == "float64" and res["outputs"]["pred_masks"]["reference"]["dtype"] == "float64"
    # 0.2% off on top of the same noise: four times the baseline's distance from the float64 forward
    wrong = _save(tmp_path / "w.safetensors", run(scale=1.002))
    res = metrics.output_correctness(base, wrong, "float32", refp)
    assert not res["passed"] and res["failures"][0].startswith("pred_masks: mean |candidate - float64 reference| ")
    assert metrics.output_correctness(base, base, "float32", refp)["worst"]["ratio_mean_abs"] == 1.0


def test_reference_is_not_used_where_it_is_blind_or_the_baseline_is_not_finite(tmp_path):
    import torch

    g = torch.Generator().manual_seed(2)
    ref = torch.randn(3, 32, generator=g)
    refp = _save(tmp_path / "r.safetensors", {"x": ref, "y": ref.clone()})
    base_t = {"x": ref + 1e-3, "y": ref.clone()}
    base_t["y"][0, 0] = float("inf")  # fp16-style overflow where the float32 forward is finite
    base = _save(tmp_path / "b.safetensors", base_t)
    cand = _save(tmp_path / "c.safetensors", {"x": ref + 1e-3, "y": base_t["y"].clone()})
    res = metrics.output_correctness(base, cand, "float16", refp)
    assert "reference" in res["outputs"]["x"] and "reference" not in res["outputs"]["y"]  # y: fixed thresholds
    assert res["passed"] and res["reference"]["tensors"] == 1
    # a float64 reference 10% off the float32 baseline took another path (other random draws): the fixed thresholds
    # judge, and a candidate off the baseline by 1e-3 fails them although it lies as far from that reference
    far = _save(tmp_path / "far.safetensors", {"x": (ref + 0.1 * ref.abs().mean()).double()})
    base32 = _save(tmp_path / "b32.safetensors", {"x": ref})
    cand32 = _save(tmp_path / "c32.safetensors", {"x": ref + 1e-3 * ref.abs().mean()})
    res = metrics.output_correctness(base32, cand32, "float32", far)
    assert "reference" not in res["outputs"]["x"] and res["reference"]["tensors"] == 0 and not res["passed"]
    assert res["failures"][0].startswith("x: mean |Δ| / mean |baseline| ")
    # the baseline exact: only the floor is allowed
    exact = _save(tmp_path / "e.safetensors", {"x": ref, "y": ref.clone()})
    res = metrics.output_correctness(exact, _save(tmp_path / "c2.safetensors", {"x": ref + 1e-3, "y": ref.clone()}),
                                     "bfloat16", refp)
    assert res["failures"][0].startswith("x: mean |candidate - float32 reference| 0.001 > ")
    assert metrics.output_correctness(exact, exact, "bfloat16", refp)["passed"]


def test_ratio_keeps_each_sides_values_in_run_order_and_says_they_were_not_interleaved():
    r = metrics.ratio([100.0, 90.0, 110.0], [103.0, 95.0, 99.0])
    assert r["baseline"]["values"] == [100.0, 90.0, 110.0] and r["candidate"]["values"] == [103.0, 95.0, 99.0]
    assert r["paired"] is False and r["ratio"] == 99.0 / 100.0


# Token models against the stock engine's float32 run (metrics.reference_correctness)

def _noisy(ref: list[list[float]], sigma: float, seed: int, shift: float = 0.0) -> list[list[float]]:
    """A bf16 run's teacher-forced logprobs: the float32 run's plus rounding noise (and a wrong kernel's shift)."""
    import random

    rng = random.Random(seed)
    return [[x + shift + rng.gauss(0.0, sigma) for x in row] for row in ref]


def _ref_runs(sigma=0.15, shift=0.0):
    import random

    rng = random.Random(0)
    truth = [[-rng.uniform(0.5, 8.0) for _ in range(100)] for _ in range(4)]
    tokens = [[1, 2, 3, 4]] * 4
    return (_run(tokens, truth), _run(tokens, _noisy(truth, sigma, 1)), _run(tokens, _noisy(truth, sigma, 2, shift)))


def test_a_rounding_only_candidate_fails_fixed_thresholds_but_passes_against_float32():
    ref, base, cand = _ref_runs()
    fixed = metrics.correctness(base, cand, "bfloat16")
    assert not fixed["passed"] and fixed["teacher_forced"]["max_abs"] > 0.5
    judged = metrics.reference_correctness(base, cand, ref)
    assert judged["passed"], judged["failures"]
    assert 0.8 < judged["teacher_forced"]["ratio_mean_abs"] < 1.2
    res = metrics.with_reference(fixed, judged)
    assert res["passed"] and res["failures"] == [] and res["fixed"] == {"passed": False, "failures": fixed["failures"]}
    assert res["teacher_forced"] == fixed["teacher_forced"]  # the baseline-vs-candidate figures stay
    assert res["summary"].startswith("fixed thresholds: failed (teacher-forced max |Δlogprob| ")
    assert "; float32 reference: passed (mean ratio " in res["summary"]


def test_a_wrong_candidate_fails_against_float32_with_both_verdicts():
    ref, base, cand = _ref_runs(shift=0.3)  # every logprob 0.3 off on top of the same rounding noise
    fixed = metrics.correctness(base, cand, "bfloat16")
    res = metrics.with_reference(fixed, metrics.reference_correctness(base, cand, ref))
    assert not res["passed"] and res["reference"]["teacher_forced"]["ratio_mean_abs"] > metrics.TOKEN_REF_RATIO
    assert res["failures"][:len(fixed["failures"])] == fixed["failures"]
    assert res["failures"][len(fixed["failures"])].startswith("float32 reference: teacher-forced mean |candidate - "
                                                              "float32| ")
    assert "; float32 reference: failed (" in res["summary"]


def test_a_localised_error_fails_the_max_against_float32():
    ref, base, cand = _ref_runs(sigma=0.02)
    cand["teacher_logprobs"][0][7] -= 2.0  # one position of 400
    judged = metrics.reference_correctness(base, cand, ref)
    tf = judged["teacher_forced"]
    assert tf["ratio_mean_abs"] < metrics.TOKEN_REF_RATIO and tf["ratio_max_abs"] > metrics.TOKEN_REF_RATIO_MAX
    assert [f.split(" |")[0] for f in judged["failures"]] == ["teacher-forced max"]


def test_greedy_partings_from_float32_count_against_the_baselines():
    ref, base, cand = _ref_runs(sigma=0.01)
    top = [[[t, 90, 91, 92, 93] for t in row] for row in ref["tokens"]]  # 9 is in no side's top 5
    ref["token_top_ids"] = base["token_top_ids"] = cand["token_top_ids"] = top
    base["tokens"] = [[1, 2, 3, 4]] * 4
    cand["tokens"] = [[1, 9, 3, 4]] * 2 + [[1, 2, 3, 4]] * 2  # two more than the baseline: the least allowance
    judged = metrics.reference_correctness(base, cand, ref)
    assert (judged["tokens"]["parted_b"], judged["tokens"]["parted_c"], judged["tokens"]["allowed_c"]) == (0, 2, 2)
    assert judged["passed"]
    cand["tokens"] = [[1, 9, 3, 4]] * 3 + [[1, 2, 3, 4]]
    assert metrics.reference_correctness(base, cand, ref)["failures"] == [
        "greedy tokens part from float32's outside a near tie in 3/4 requests (baseline: 0; allowed 2)"]
    base["tokens"] = [[1, 9, 3, 4]] + [[1, 2, 3, 4]] * 3  # the baseline parts too: one more allowed
    assert metrics.reference_correctness(base, cand, ref)["passed"]
    cand["tokens"] = [[1, 90, 3, 4]] * 4  # partings at a near tie of the float32 run are free
    assert metrics.reference_correctness(base, cand, ref)["tokens"]["parted_c"] == 0
    many = [[1, 2, 3, 4]] * 16
    assert metrics.reference_correctness(_run(many, ref["teacher_logprobs"]), _run(many, cand["teacher_logprobs"]),
                                         _run(many, ref["teacher_logprobs"]))["tokens"]["allowed_c"] == 4  # 16 / 4


def test_a_float32_run_that_the_baseline_parts_from_everywhere_cannot_judge():
    ref, base, cand = _ref_runs(shift=0.3)
    top = [[[t, 90, 91, 92, 93] for t in row] for row in ref["tokens"]]
    ref["token_top_ids"] = base["token_top_ids"] = cand["token_top_ids"] = top
    base["tokens"] = cand["tokens"] = [[9, 2, 3, 4]] * 4  # both part at the first token: the allowance covers all
    judged = metrics.reference_correctness(base, cand, ref)
    assert not judged["passed"] and judged["failures"] == [judged["inconclusive"]]
    assert judged["inconclusive"].startswith("cannot judge: the stock run itself parts from it outside a near tie "
                                             "in 4/4 requests")
    res = metrics.with_reference(metrics.correctness(base, cand, "bfloat16"), judged)
    assert res["inconclusive"] == judged["inconclusive"] and "; float32 reference: inconclusive (" in res["summary"]
    base["tokens"] = [[9, 2, 3, 4]] + [[1, 2, 3, 4]] * 3  # one parting: 3 allowed of 4, the rule can fail again
    assert "inconclusive" not in metrics.reference_correctness(base, cand, ref)


def test_both_sides_at_float32_pass_on_the_slack_and_a_missing_reference_leaves_the_verdict():
    ref, base, cand = _ref_runs()
    assert metrics.reference_correctness(ref, ref, ref)["passed"]
    fixed = metrics.correctness(base, cand, "bfloat16")
    res = metrics.with_reference(fixed, None, "the float32 run ended error: no float32 attention backend")
    assert not res["passed"] and res["failures"] == fixed["failures"] and "reference" not in res
    assert res["reference_error"] == "the float32 run ended error: no float32 attention backend"
    assert res["summary"].endswith("float32 reference: none (the float32 run ended error: no float32 attention "
                                   "backend), the fixed verdict stands")
    empty = _run(ref["tokens"], [[None] * 100] * 4)
    assert metrics.reference_correctness(base, cand, empty)["failures"] == [
        "no teacher-forced logprobs to compare with the float32 run"]


def test_the_median_error_ratio_fails_a_dense_error_that_a_few_far_positions_hide_from_the_mean():
    tokens = [[1, 2, 3, 4]] * 4
    ref = _run(tokens, [[-1.0] * 100] * 4)
    base = _run(tokens, [[-1.0 - 0.01] * 90 + [-3.0] * 10] * 4)  # bf16 noise, and a few router flips far off
    dense = _run(tokens, [[-1.0 - 0.03] * 90 + [-3.0] * 10] * 4)  # the same flips, and every position 3x off
    verdict = metrics.reference_correctness(base, dense, ref)
    judged = verdict["teacher_forced"]
    assert judged["ratio_mean_abs"] < metrics.TOKEN_REF_RATIO and judged["ratio_median_abs"] == pytest.approx(3.0)
    assert not verdict["passed"] and len(verdict["failures"]) == 1 and "median" in verdict["failures"][0]
    assert "median ratio 3.00 (<= 1.5)" in metrics.reference_summary(verdict)
    same_flips = _run(tokens, [[-1.0 - 0.012] * 90 + [-3.0] * 10] * 4)  # bf16 noise of another kernel: passes
    assert metrics.reference_correctness(base, same_flips, ref)["passed"]


def test_a_rounding_dominated_16_bit_model_is_judged_by_the_fixed_thresholds_and_never_passes_on_the_ratio(tmp_path):
    """Session 65's fk46-efficientnetv2 (bf16, seeded BatchNorm statistics): the stock run 105% off its own float32
    forward; the Triton kernels 74% off the stock run, err_c / err_b 0.72: PASSED by the ratio rule, where any kernel
    would be."""
    import torch

    g = torch.Generator().manual_seed(5)
    ref = {"logits": torch.randn(2, 1000, generator=g), "feat": torch.randn(2, 64, generator=g)}
    refp = _save(tmp_path / "r.safetensors", ref)

    def run(noise, **extra):  # rounding-dominated logits (noise of ``noise`` x mean |ref|), a sane feature map
        return {"logits": (ref["logits"] + noise * ref["logits"].abs().mean() * torch.randn(2, 1000, generator=g)
                           ).bfloat16(), "feat": extra.get("feat", _bf16_run(ref["feat"], g))}
    base = _save(tmp_path / "b.safetensors", run(0.9))
    res = metrics.output_correctness(base, _save(tmp_path / "c.safetensors", run(0.9)), "bfloat16", refp)
    assert not res["passed"] and res["inconclusive"].startswith("cannot judge: the stock run itself lies over 10%")
    assert "logits" in res["inconclusive"] and "feat" not in res["inconclusive"]
    assert res["outputs"]["logits"]["reference"]["blind"] and not res["outputs"]["feat"]["reference"]["blind"]
    assert res["reference"]["tensors"] == 1 and res["failures"][0].startswith("logits: mean |Δ| / mean |baseline|")
    # the engine's own kernels (passthrough): the same outputs pass the fixed thresholds
    same = metrics.output_correctness(base, base, "bfloat16", refp)
    assert same["passed"] and "inconclusive" not in same
    # a wrong sane tensor beside it: INCORRECT, not INCONCLUSIVE
    wrong = run(0.9, feat=_bf16_run(ref["feat"], g, scale=1.3))
    res = metrics.output_correctness(base, _save(tmp_path / "w.safetensors", wrong), "bfloat16", refp)
    assert not res["passed"] and "inconclusive" not in res
    # a result judged before this rule: fk scenarios reads its PASSED as INCONCLUSIVE
    old = metrics.output_correctness(base, _save(tmp_path / "c2.safetensors", run(0.9)), "bfloat16", refp)
    assert metrics.outputs_blind(old).startswith("cannot judge")
    assert metrics.outputs_blind(same) == "" and metrics.outputs_blind({"kind": "outputs", "dtype": "float32"}) == ""
