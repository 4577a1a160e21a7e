"""SGLang 0.5.15's own CUDA kernels for each slot, in the slot's interface.

What a passthrough plugin routes to: the kernels ``forward_cuda`` calls on its default
path (sgl_kernel norms, sglang.jit_kernel activations and RoPE). Imported lazily: these
modules exist only where SGLang runs (CUDA). Never call a hooked ``forward_cuda`` here.
"""
from __future__ import annotations

import torch

_FAST_ROPE_HEAD_SIZES = (64, 128, 256, 512)  # forward_cuda's apply_rope path; others use the fallback kernel


def rms_norm(x, weight, eps):
    from sgl_kernel import rmsnorm

    return rmsnorm(x, weight, eps)


def fused_add_rms_norm(x, residual, weight, eps):
    from sgl_kernel import fused_add_rmsnorm

    fused_add_rmsnorm(x, residual, weight, eps)


def _gated_out(x):
    return torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)


def silu_and_mul(x):
    from sglang.jit_kernel.activation import silu_and_mul as kernel

    out = _gated_out(x)
    kernel(x, out)
    return out


def gelu_and_mul(x, approximate):
    from sglang.jit_kernel import activation

    out = _gated_out(x)
    (activation.gelu_tanh_and_mul if approximate == "tanh" else activation.gelu_and_mul)(x, out)
    return out


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
    from sglang.jit_kernel import rope

    rot = cos_sin_cache.shape[-1]
    if key is not None and cos_sin_cache.dtype == torch.float32 and head_size in _FAST_ROPE_HEAD_SIZES:
        n = positions.size(0)
        q = query.view(n, -1, head_size)[..., :rot]
        k = key.view(n, -1, head_size)[..., :rot]
        rope.apply_rope_with_cos_sin_cache_inplace(positions=positions, q=q, k=k, cos_sin_cache=cos_sin_cache,
                                                   is_neox=is_neox)
        return
    rope.rotary_embedding(positions, query, key, head_size, cos_sin_cache.to(query.dtype), is_neox)


def gemm(x, weight, bias):
    return torch.nn.functional.linear(x, weight, bias)  # UnquantizedLinearMethod.apply's CUDA path (cuBLAS)


_MOE_ACTIVATIONS = {"silu": "silu", "gelu": "gelu", "swigluoai": "silu"}  # swigluoai: silu with alpha and limit


def _server_args_published() -> None:
    """SGLang's Triton MoE reads the server args; outside a server (``fk check``) publish a bare ``ServerArgs``
    (no ``__post_init__``, which would resolve a model), which SGLang takes as a sentinel: reads see the class
    defaults, as its own test kits do."""
    from sglang.srt.server_args import ServerArgs, get_global_server_args, set_global_server_args_for_scheduler

    try:
        get_global_server_args()
    except ValueError:
        set_global_server_args_for_scheduler(ServerArgs.__new__(ServerArgs))


def fused_moe(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, w13_bias, w2_bias,
              alpha, limit, routed_scaling_factor):
    """SGLang's Triton MoE (the kernels of its default runner), out of place; ids outside [0, E) filtered."""
    from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe import outplace_fused_experts

    if activation not in _MOE_ACTIVATIONS:
        raise ValueError(f"SGLang's Triton MoE has no {activation!r} activation")
    _server_args_published()
    swiglu = activation == "swigluoai"
    return outplace_fused_experts(
        x, w13, w2, topk_weights, topk_ids, w13_bias, w2_bias, activation=_MOE_ACTIVATIONS[activation],
        apply_router_weight_on_input=apply_router_weight_on_input, routed_scaling_factor=routed_scaling_factor,
        gemm1_alpha=alpha if swiglu else None, gemm1_limit=limit if swiglu else None, filter_expert=True)


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, max_query_len, scale, window_left,
                    softcap, out):
    """FlashAttention 3 over the paged cache, as SGLang's fa3 backend calls it for plain extend and decode."""
    from sglang.jit_kernel.flash_attention import flash_attn_with_kvcache

    flash_attn_with_kvcache(q=q, k_cache=k_cache, v_cache=v_cache, page_table=block_table, cache_seqlens=seq_lens,
                            cu_seqlens_q=query_start_loc, max_seqlen_q=max_query_len, softmax_scale=scale,
                            causal=True, window_size=(window_left, 0), softcap=softcap, out=out)


NATIVES = {f.__name__: f for f in (rms_norm, fused_add_rms_norm, silu_and_mul, gelu_and_mul, rotary_embedding,
                                   gemm, fused_moe, paged_attention)}
