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
