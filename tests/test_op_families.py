import pytest

from fk_adapters import op_families


@pytest.mark.parametrize("name,family", [
    ("void vllm::rms_norm_kernel<c10::BFloat16, 8>(...)", "rms_norm"),
    ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16>", "rms_norm"),
    ("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel>", "activation"),
    ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>", "rotary"),
    ("flash::flash_fwd_splitkv_kernel<...>", "attention"),
    ("void flash::FlashAttnFwdSm90<...>", "attention"),
    ("fk_triton_paged_attention_kernel", "attention"),
    ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16>", "kv cache write"),  # the engine's,
    ("void flash::flash_fwd_splitkv_mla_kernel<...>", "mla attention"),  # MLA too: outside paged_attention
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "gemm"),
    ("fused_moe_kernel", "moe"),
    ("_p_matmul_ogs_NNN_bf16xbf16xbf16_16x256x64x1_swiglu", "moe"),  # GPT-OSS's experts, SwiGLU fused in
    ("void vllm::moe::topkGatingSoftmax<8, 8, 4, 16, 64, int>(...)", "moe routing"),  # the engine's routing,
    ("void moe_fused_gate_kernel<float>(...)", "moe routing"),  # not the fused_moe slot's experts
    ("void vllm::moe::moe_align_block_size_kernel<int>", "moe"),
    ("_chunk_scan_fwd_kernel", "ssm / linear attention"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>", "layer_norm"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "copy / elementwise"),
    # seen on an H100 in EfficientNetV2 (session 30): not an index gather, which its template arguments match
    ("void at::native::batch_norm_transform_input_kernel<c10::BFloat16, c10::BFloat16, float, true, int>"
     "(torch::headeronly::detail::GenericPackedTensorAccessor<c10::BFloat16 const, 4ul, at::RestrictPtrTraits, "
     "int> const, ...)", "batch norm"),
    ("some_unheard_of_kernel", "other"),
])
def test_kernel_names_fall_in_their_family(name, family):
    assert op_families.family(name) == family


def test_shares_sum_to_one_over_merged_processes():
    merged = op_families.merge_kernel_us([{"kernel_us": {"rms_norm_kernel": 10.0, "nvjet_x": 70.0}},
                                         {"kernel_us": {"nvjet_x": 20.0}}, {"kernels": {"a": 1}}])
    shares = op_families.shares(merged)
    assert list(shares) == ["gemm", "rms_norm"] and shares["gemm"] == pytest.approx(0.9)
    assert op_families.shares({}) == {}


class _Evt:
    """A torch profiler event as ``kernel_profile`` and ``slot_us`` read it."""

    def __init__(self, name, device="DeviceType.CPU", us=0.0, annotation=False, start=0.0, stream=7):
        self.name, self.device_type, self.is_user_annotation = name, device, annotation
        self.device_index, self.device_resource_id = 0, stream
        self.device_time_total = us  # a host range's total counts nothing (it can hold a device span twice)
        self.time_range = type("R", (), {"start": start, "end": start + us})()


def _kernel(name, start, us, stream=7):
    return _Evt(name, device="DeviceType.CUDA", us=us, start=start, stream=stream)


def _span(slot, start, us, stream=7):
    return _Evt(op_families.SLOT_SCOPE + slot, device="DeviceType.CUDA", us=us, annotation=True, start=start,
                stream=stream)


def test_device_time_inside_slot_calls_counts_each_kernel_once_for_its_outermost_slot_span():
    events = [_Evt(op_families.SLOT_SCOPE + "fused_moe", us=500.0, annotation=True),  # host side: not counted
              _span("fused_moe", 0.0, 100.0), _span("gemm", 10.0, 20.0),  # a nested call counts for the outer
              _kernel("nvjet_router", 10.0, 20.0), _kernel("fused_moe_kernel", 40.0, 60.0),
              _kernel("on_another_stream", 50.0, 5.0, stream=8), _kernel("after", 101.0, 9.0),
              _span("gemm", 120.0, 30.0), _kernel("nvjet", 125.0, 25.0)]
    got = op_families.slot_us(events)
    assert got == {"fused_moe": 80.0, "gemm": 25.0}
    kernel_total = sum(e.time_range.end - e.time_range.start for e in events
                       if e.device_type.endswith("CUDA") and not e.is_user_annotation)
    assert sum(got.values()) <= kernel_total


def test_kernel_profile_leaves_the_device_side_of_a_range_out_of_the_kernels():
    events = [_kernel("nvjet_tst", 1.0, 40.0), _span("gemm", 0.0, 45.0),
              _Evt(op_families.SLOT_SCOPE + "gemm", us=40.0, annotation=True)]
    prof = type("P", (), {"events": lambda self: events})()
    got = op_families.kernel_profile(prof)
    assert got["kernel_us"] == {"nvjet_tst": 40.0} and got["slot_us"] == {"gemm": 40.0}
    assert "slot_us" not in op_families.kernel_profile(type("P", (), {"events": lambda self: events[:1]})())


def test_a_chrome_trace_credits_the_kernels_inside_a_slot_span_on_their_own_stream():
    scope = op_families.SLOT_SCOPE
    trace = [{"cat": "gpu_user_annotation", "name": scope + "gated_rms_norm", "ts": 100.0, "dur": 50.0, "pid": 0,
              "tid": 7},
             {"cat": "kernel", "name": "elementwise_kernel", "ts": 100.0, "dur": 20.0, "pid": 0, "tid": 7},
             {"cat": "kernel", "name": "reduce_kernel", "ts": 125.0, "dur": 25.0, "pid": 0, "tid": 7},
             {"cat": "kernel", "name": "other_stream", "ts": 110.0, "dur": 5.0, "pid": 0, "tid": 8},
             {"cat": "kernel", "name": "nvjet_after", "ts": 151.0, "dur": 30.0, "pid": 0, "tid": 7}]
    assert op_families.trace_slot_us(trace) == {"gated_rms_norm": 45.0}
    nested = {"cat": "gpu_user_annotation", "name": scope + "rms_norm", "ts": 101.0, "dur": 10.0, "pid": 0, "tid": 7}
    assert op_families.trace_slot_us([nested] + trace) == {"gated_rms_norm": 45.0}  # the outer call's
    assert op_families.trace_slot_us(trace[1:]) == {}


def test_host_time_counts_each_ranges_self_time_on_its_own_thread(monkeypatch):
    ranges = [(1, 0.0, 100.0, "aten::linear"), (1, 10.0, 40.0, "aten::mm"), (1, 20.0, 30.0, "cudaLaunchKernel"),
              (1, 50.0, 60.0, "cudaLaunchKernel"), (2, 0.0, 50.0, "aten::linear"),
              (1, 100.0, 130.0, "step"), (1, 100.0, 110.0, "aten::add")]  # same start: the enclosing range first
    got = op_families.host_time(ranges)
    assert got["host_calls"] == {"aten::linear": 2, "step": 1, "aten::mm": 1, "cudaLaunchKernel": 2, "aten::add": 1}
    assert got["host_us"] == {"aten::linear": 110.0, "step": 20.0, "aten::mm": 20.0, "cudaLaunchKernel": 20.0,
                              "aten::add": 10.0}  # linear: 100 - mm 30 - launch 10, plus 50 on thread 2
    assert got["host_cut"] is False and op_families.host_time([]) == {}
    monkeypatch.setattr(op_families, "HOST_KEEP", 2)
    cut = op_families.host_time(ranges)
    assert list(cut["host_us"]) == ["aten::linear", "aten::mm"] and cut["host_cut"] is True


def test_a_real_profile_names_the_host_ops_and_a_chrome_trace_its_host_ranges():
    import torch

    a = torch.randn(64, 64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("fk-test-step"):
            for _ in range(3):
                torch.mm(a, a)
    got = op_families.kernel_profile(prof)
    assert got["kernel_us"] == {} and got["host_calls"]["aten::mm"] == 3 and got["host_calls"]["fk-test-step"] == 1
    assert got["host_us"]["aten::mm"] > 0
    trace = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10.0, "dur": 30.0, "pid": 1, "tid": 2},
             {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 20.0, "dur": 5.0, "pid": 1, "tid": 2},
             {"ph": "X", "cat": "kernel", "name": "nvjet", "ts": 22.0, "dur": 50.0, "pid": 1, "tid": 7}]
    assert op_families.trace_host_time(trace)["host_us"] == {"aten::mm": 25.0, "cudaLaunchKernel": 5.0}
