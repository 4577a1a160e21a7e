"""Where the device time went: families, shares of the delta, kernels on one side only."""
from fk_adapters import time_split


def _profile(kernel_us):
    return [{"pid": 1, "kernels": {k: 1 for k in kernel_us}, "kernel_us": kernel_us}]


def test_a_slower_gemm_and_a_broken_fusion_are_named():
    base = _profile({"nvjet_tst_128x64": 800.0, "triton_poi_fused_rms_norm_mul_0": 100.0, "flash_fwd_kernel": 100.0})
    cand = _profile({"fk_triton_gemm_kernel": 950.0, "fk_triton_rms_norm_kernel": 60.0, "elementwise_kernel": 40.0,
                     "flash_fwd_kernel": 100.0})
    s = time_split.split(base, cand)
    assert (s["baseline_us"], s["candidate_us"]) == (1000.0, 1150.0) and abs(s["step_ratio"] - 1000 / 1150) < 1e-9
    fam = {r["family"]: r for r in s["families"]}
    assert (fam["gemm"]["delta_us"], fam["gemm"]["share_of_delta"], fam["gemm"]["slots"]) == (150.0, 1.0, ["gemm"])
    assert fam["attention"]["delta_us"] == 0.0 and s["families"][0]["family"] == "gemm"  # most of the delta first
    assert [k["kernel"] for k in s["only_candidate"]] == ["fk_triton_gemm_kernel", "fk_triton_rms_norm_kernel",
                                                          "elementwise_kernel"]
    assert [k["kernel"] for k in s["only_baseline"]] == ["nvjet_tst_128x64", "triton_poi_fused_rms_norm_mul_0"]
    text = "\n".join(time_split.markdown("fk46-llama-3.1", s))
    assert "| gemm" in text and "+100.0%" in text and "Only in the baseline" in text


def test_the_device_idle_between_kernels_is_told_apart_from_their_device_time():
    """Kernels of 10 µs each: the candidate's launch gaps grow, its device time does not."""
    from fk_adapters import op_families

    base = _profile({"k": 30.0})
    cand = _profile({"k": 30.0})
    base[0].update(op_families.span_busy([(0, 10), (10, 20), (5, 30)]))  # overlapping streams: busy once
    cand[0].update(op_families.span_busy([(0, 10), (40, 50), (90, 100)]))
    assert base[0] == dict(base[0], span_us=30.0, busy_us=30.0) and cand[0]["busy_us"] == 30.0
    s = time_split.split(base, cand)
    assert (s["baseline_idle_us"], s["candidate_idle_us"], s["step_ratio"]) == (0.0, 70.0, 1.0)
    assert "waited on the host" in "\n".join(time_split.markdown("x", s))
    assert time_split.split(_profile({"k": 1.0}), cand)["baseline_idle_us"] is None  # an older profile: no claim
    assert op_families.span_busy([]) == {}


def test_no_split_without_a_profile_on_both_sides():
    assert time_split.split(None, _profile({"k": 1.0})) is None
    assert time_split.split(_profile({"k": 1.0}), []) is None


def test_compare_shows_where_heads_candidate_moved_the_time():
    from fk_adapters import compare
    from tests.test_compare import results, row

    stock = {"nvjet_tst_128x64": 800.0, "flash_fwd_kernel": 100.0}
    base_row, head_row = row(), row()
    base_row["time_split"] = time_split.split(_profile(stock), _profile({"fk_triton_gemm_kernel": 950.0,
                                                                          "flash_fwd_kernel": 100.0}))
    head_row["time_split"] = time_split.split(_profile(stock), _profile({"fk_triton_gemm_kernel": 820.0,
                                                                          "flash_fwd_kernel": 100.0}))
    (moved_gemm, *_) = time_split.moved(base_row["time_split"], head_row["time_split"])
    assert (moved_gemm["family"], moved_gemm["base_us"], moved_gemm["head_us"], moved_gemm["delta_us"]) == (
        "gemm", 950.0, 820.0, -130.0)
    text = compare.to_markdown(compare.compare(results(base_row), results(head_row), threshold=0.02))
    assert "Where the device time moved" in text and "| gemm" in text and "950 (800)" in text and "-130" in text
