"""SGLang 0.5.15's own CUDA kernels for each slot, in the slot's interface.

What a passthrough plugin routes to: the kernels ``forward_cuda`` calls on its default
path (sgl_kernel norms, sglang.jit_kernel activations and RoPE; FLA and Mamba kernels for
the linear-attention slots). Imported lazily: these modules exist only where SGLang runs
(CUDA). Never call a hooked method or function here (``forward_cuda``, TritonGDNKernel's,
``mamba_chunk_scan_combined``, ``selective_state_update``): the hook would call itself.
"""
from __future__ import annotations

import torch

from fk_adapters.groups import all_reduce

_FAST_ROPE_HEAD_SIZES = (64, 128, 256, 512)  # forward_cuda's apply_rope path; others use the fallback kernel


def rms_norm(x, weight, eps):
    from sgl_kernel import rmsnorm

    # the kernel takes 2-D rows; the slot takes [..., H] (a diffusers model's 4-D per-head q / k norms)
    return rmsnorm(x.reshape(-1, x.shape[-1]), weight, eps).reshape(x.shape)


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


def sdpa(q, k, v, attn_mask, is_causal, scale):
    """FlashAttention 3 on a dense batch, as the diffusion runtime's FlashAttentionImpl calls it for its DiT
    attention on a Hopper GPU (``[B, S, H, D]`` views, no sequence lengths); no mask (its calls pass none)."""
    from sglang.jit_kernel.flash_attention import flash_attn_varlen_func

    if attn_mask is not None:
        raise ValueError("SGLang's diffusion attention takes no mask")
    q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out = flash_attn_varlen_func(q=q, k=k, v=v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=q.shape[1],
                                 max_seqlen_k=k.shape[1], softmax_scale=scale, causal=is_causal, ver=3)
    return out.transpose(1, 2)


SSD_CHUNK = 256  # Mamba2's chunk size (the scan's result does not depend on it)


def _live(state_indices, cu_seqlens):
    """(token rows, pool indices, cu_seqlens) of the sequences not skipped (index >= 0); None when none is live.
    All live (SGLang's prefill): the tensors as given. Syncs: prefill only."""
    live = state_indices >= 0
    if bool(live.all()):
        return slice(None), state_indices, cu_seqlens, live
    if not bool(live.any()):
        return None
    lens = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    rows = torch.repeat_interleave(live, lens)
    cu = torch.cat([lens.new_zeros(1), lens[live].cumsum(0)]).to(torch.int32)
    return rows, state_indices[live], cu, live


def _contiguous_pool(state):
    """SGLang's kernels index a pool as contiguous slots (page-major pools go through contiguous copies there too)."""
    return state if state.is_contiguous() else state.contiguous()


def gated_delta_rule(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, scale, use_qk_l2norm,
                     out):
    """FLA's chunk kernel as TritonGDNKernel.extend calls it, in place on the pool at the live indices; a sequence
    without an initial state has its slot zeroed first (as SGLang zeroes a slot it hands out)."""
    from sglang.srt.layers.attention.fla.chunk import chunk_gated_delta_rule

    if g.dim() != 2:
        raise NotImplementedError("SGLang's GDN chunk kernel takes a per-head decay g [T, HV], not KDA's per-key one")
    if q.dtype == torch.float32:
        raise NotImplementedError("SGLang's GDN chunk kernel takes bfloat16/float16 q, k, v (it asserts)")
    batch = _live(state_indices, cu_seqlens)
    if batch is None:
        return
    rows, idx, cu, live = batch
    pool = _contiguous_pool(state)
    if has_initial_state is not None:
        pool[idx[~has_initial_state[live]].long()] = 0
    o, _, _ = chunk_gated_delta_rule(q=q[rows][None], k=k[rows][None], v=v[rows][None], g=g[rows].float()[None],
                                     beta=beta[rows].float()[None], scale=scale, initial_state=pool,
                                     initial_state_indices=idx, cu_seqlens=cu, use_qk_l2norm_in_kernel=use_qk_l2norm)
    if pool is not state:
        state.copy_(pool)
    out[rows] = o[0].to(out.dtype)


def gated_delta_rule_decode(q, k, v, g, beta, state, state_indices, scale, use_qk_l2norm, out):
    """FLA's recurrent update (g and beta given; the kernel the fused sigmoid-gating decode is built on), one token
    per sequence, in place on the pool. Graph-safe: the kernel skips index < 0 itself; those rows of out are kept."""
    from sglang.srt.layers.attention.fla.fused_recurrent import fused_recurrent_gated_delta_rule_update

    if g.dim() != 2:
        raise NotImplementedError("SGLang's GDN decode kernel takes a per-head decay g [R, HV], not KDA's per-key one")
    pool = _contiguous_pool(state)
    o = fused_recurrent_gated_delta_rule_update(
        q=q[:, None], k=k[:, None], v=v[:, None], g=g.float()[:, None], beta=beta.float()[:, None], scale=scale,
        initial_state_source=pool, initial_state_indices=state_indices, use_qk_l2norm_in_kernel=use_qk_l2norm)
    if pool is not state:
        state.copy_(pool)
    out.copy_(torch.where((state_indices >= 0)[:, None, None], o[:, 0].to(out.dtype), out))


def ssd_chunk_scan(x, dt, A, B, C, D, dt_bias, state, state_indices, cu_seqlens, has_initial_state, out):
    """SGLang's SSD chunk scan (``_mamba_chunk_scan_combined_fwd``: the public function is hooked) over the live
    sequences' gathered states, with the chunk metadata SGLang's Mamba2 backend computes; final states scattered."""
    from sglang.srt.layers.attention.mamba.mamba2_metadata import Mamba2Metadata
    from sglang.srt.layers.attention.mamba.ops.ssd_combined import _mamba_chunk_scan_combined_fwd

    batch = _live(state_indices, cu_seqlens)
    if batch is None:
        return
    rows, idx, cu, live = batch
    idx = idx.long()
    h0 = state[idx]
    if has_initial_state is not None:
        h0 = torch.where(has_initial_state[live][:, None, None, None], h0, 0)
    xs = x[rows]
    t, n = xs.shape[0], idx.shape[0]
    seq_idx = torch.repeat_interleave(torch.arange(n, dtype=torch.int32, device=x.device), cu.diff(),
                                      output_size=t)[None]
    chunk_indices, chunk_offsets = Mamba2Metadata._query_start_loc_to_chunk_indices_offsets(cu, SSD_CHUNK, t)
    y = torch.empty((1, t) + tuple(out.shape[1:]), dtype=out.dtype, device=out.device)
    *_, varlen = _mamba_chunk_scan_combined_fwd(
        xs[None], dt[rows][None], A, B[rows][None], C[rows][None], SSD_CHUNK, D=D, z=None, dt_bias=dt_bias,
        initial_states=h0, seq_idx=seq_idx, chunk_indices=chunk_indices, chunk_offsets=chunk_offsets, cu_seqlens=cu,
        dt_softplus=True, dt_limit=(0.0, float("inf")), state_dtype=state.dtype, out=y)
    state[idx] = varlen.to(state.dtype)
    out[rows] = y[0]


def ssm_state_update(x, dt, A, B, C, D, dt_bias, state, state_indices, out):
    """SGLang's selective state update: the backend its server configured (the dispatcher's callable, not the hooked
    dispatch function), else the default Triton kernel (``fk check`` runs with no engine). Graph-safe; pad rows
    (index < 0) keep their out."""
    from sglang.srt.layers.attention.mamba.ops import ssu_dispatch

    kernel = ssu_dispatch._mamba_ssu_backend
    if kernel is None:
        from sglang.srt.layers.attention.mamba.ops.mamba_ssm import selective_state_update as kernel
    _, h, p, n = state.shape
    y = torch.empty_like(out)
    kernel(state, x, dt[..., None].expand(-1, -1, p), A[:, None, None].expand(h, p, n).float(), B, C,
           D=None if D is None else D[:, None].expand(h, p), z=None, dt_bias=dt_bias[:, None].expand(h, p),
           dt_softplus=True, state_batch_indices=state_indices, pad_slot_id=-1, out=y)
    out.copy_(torch.where((state_indices >= 0)[:, None, None], y, out))


NATIVES = {f.__name__: f for f in (rms_norm, fused_add_rms_norm, silu_and_mul, gelu_and_mul, rotary_embedding,
                                   gemm, fused_moe, paged_attention, gated_delta_rule, gated_delta_rule_decode,
                                   ssd_chunk_scan, ssm_state_update, all_reduce, sdpa)}
