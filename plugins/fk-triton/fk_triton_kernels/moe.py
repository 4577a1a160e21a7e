"""Slot ``fused_moe``: the routed experts after routing, as two grouped Triton matmuls over tokens sorted by expert.

The (token, choice) pairs are sorted by expert into blocks of BLOCK_M rows, each block holding one expert's
pairs (padded with a sentinel). Kernel 1 runs one program per (block, tile of I): gate and up rows of that
expert's w13 against the block's gathered x rows, then the activation; kernel 2 one per (block, tile of H):
the expert's w2 against the block's activations, scaled by the router weight, written to the pair's own row in x's
dtype. The k rows of a token are then summed (in float32, rounded once). Everything stays on the device (no host
synchronisation, so it can be captured in a CUDA graph); pairs whose expert id is outside [0, E) are never placed in a
block.

BLOCK_M follows the pairs per expert (its bucket); the tile of each kernel (BLOCK_N, BLOCK_K, warps, stages) is
autotuned per (bucket, H, I) among that bucket's tiles, so a new batch size in a seen bucket reuses the tuned tile
(the engine's warm-up runs each bucket before its CUDA graph capture). Interpreted there is one tile, no tuning.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fk_triton_kernels.kernels import fk_triton_gelu
from fk_triton_kernels.tuning import INTERPRETED, bucket_tuned

ACTIVATIONS = {"silu": 0, "gelu": 1, "gelu_tanh": 2, "swigluoai": 3}


@triton.jit
def _fk_triton_moe_act(gate, up, alpha, limit, ACT: tl.constexpr):
    if ACT == 0:
        return gate / (1.0 + tl.exp(-gate)) * up
    if ACT == 3:  # swigluoai
        gate = tl.minimum(gate, limit)
        up = tl.minimum(tl.maximum(up, -limit), limit)
        return (up + 1.0) * gate / (1.0 + tl.exp(-alpha * gate))
    return fk_triton_gelu(gate, ACT == 2) * up


# Pairs per expert (the bucket's bound) -> BLOCK_M, and the (BLOCK_N, BLOCK_K, warps, stages) tiles tried there: few
# rows per expert stream each expert's weights once, so narrow rows and long K; many rows want wide tensor-core tiles.
# BLOCK_N 32 doubles the programs of a decode step's down projection (Mixtral at 1 token: 2 experts x 4096 / 64 =
# 128 programs for 132 SMs), where session 27's check measured 0.785x vLLM's kernel.
_BUCKETS = {16: 16, 64: 32, 256: 64, 1 << 30: 128}
_BUCKET_TILES = {
    16: ((64, 64, 4, 3), (128, 128, 4, 5), (64, 256, 4, 3), (128, 128, 8, 3), (64, 128, 4, 4), (32, 256, 4, 4),
         (32, 128, 4, 3)),
    64: ((64, 64, 4, 3), (128, 128, 4, 3), (128, 64, 4, 4), (64, 128, 4, 4)),
    256: ((64, 64, 4, 3), (128, 64, 4, 4), (128, 128, 8, 3), (64, 128, 4, 4)),
    1 << 30: ((64, 64, 4, 3), (128, 64, 8, 4), (128, 128, 8, 3), (64, 128, 8, 4)),
}


def moe_bucket(pairs: int, experts: int) -> int:
    """The bucket of the mean pairs per expert (a key of the autotuner, with H and I)."""
    per_expert = -(-pairs // max(experts, 1))
    return next(b for b in _BUCKETS if per_expert <= b)


def _configs() -> list:
    if INTERPRETED:
        return [triton.Config({"BLOCK_N": 32, "BLOCK_K": 32, "BUCKET": 0})]
    return [triton.Config({"BLOCK_N": n, "BLOCK_K": k, "BUCKET": b}, num_warps=w, num_stages=st)
            for b, tiles in _BUCKET_TILES.items() for n, k, w, st in tiles]


@bucket_tuned(_configs(), ["H", "INTER"])
@triton.jit
def fk_triton_moe_gate_up_kernel(x_ptr, w_ptr, b_ptr, tw_ptr, sorted_ptr, block_expert_ptr, inter_ptr, n_pairs,
                                 topk, H, INTER, stride_xt, stride_we, stride_wn, stride_wk, stride_be, stride_inter,
                                 alpha, limit, M_BUCKET, ACT: tl.constexpr, WEIGHT_ON_INPUT: tl.constexpr,
                                 HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                 BLOCK_K: tl.constexpr, BUCKET: tl.constexpr):
    block = tl.program_id(0)
    e = tl.load(block_expert_ptr + block).to(tl.int64)
    if e < 0:  # a block past the last expert's
        return
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + rows)
    valid = pair < n_pairs
    tok = pair // topk
    cols = (tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    cmask = cols < INTER
    if ACT == 3:  # swigluoai: gate and up rows interleaved
        gate_rows, up_rows = 2 * cols, 2 * cols + 1
    else:
        gate_rows, up_rows = cols, cols + INTER
    w_e = w_ptr + e * stride_we
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        kmask = ks < H
        a = tl.load(x_ptr + tok[:, None] * stride_xt + ks[None, :], mask=valid[:, None] & kmask[None, :], other=0.0)
        wmask = cmask[None, :] & kmask[:, None]
        wg = tl.load(w_e + gate_rows[None, :] * stride_wn + ks[:, None] * stride_wk, mask=wmask, other=0.0)
        wu = tl.load(w_e + up_rows[None, :] * stride_wn + ks[:, None] * stride_wk, mask=wmask, other=0.0)
        acc_g = tl.dot(a, wg, acc_g, input_precision="ieee")
        acc_u = tl.dot(a, wu, acc_u, input_precision="ieee")
    if WEIGHT_ON_INPUT:  # w2[e] @ act(w13[e] @ (w x)) = ... act(w * (w13[e] @ x)): scale the product instead of x
        tw = tl.load(tw_ptr + pair, mask=valid, other=0.0).to(tl.float32)
        acc_g *= tw[:, None]
        acc_u *= tw[:, None]
    if HAS_BIAS:
        acc_g += tl.load(b_ptr + e * stride_be + gate_rows, mask=cmask, other=0.0).to(tl.float32)[None, :]
        acc_u += tl.load(b_ptr + e * stride_be + up_rows, mask=cmask, other=0.0).to(tl.float32)[None, :]
    act = _fk_triton_moe_act(acc_g, acc_u, alpha, limit, ACT)
    tl.store(inter_ptr + rows[:, None] * stride_inter + cols[None, :], act.to(inter_ptr.dtype.element_ty),
             mask=cmask[None, :])


@bucket_tuned(_configs(), ["H", "INTER"])
@triton.jit
def fk_triton_moe_down_kernel(inter_ptr, w_ptr, b_ptr, tw_ptr, sorted_ptr, block_expert_ptr, out_ptr, n_pairs,
                              H, INTER, stride_inter, stride_we, stride_wn, stride_wk, stride_be, stride_out, M_BUCKET,
                              WEIGHT_ON_INPUT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BUCKET: tl.constexpr):
    block = tl.program_id(0)
    e = tl.load(block_expert_ptr + block).to(tl.int64)
    if e < 0:
        return
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ptr + rows)
    valid = pair < n_pairs
    cols = (tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    cmask = cols < H
    w_e = w_ptr + e * stride_we
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, INTER, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        kmask = ks < INTER
        a = tl.load(inter_ptr + rows[:, None] * stride_inter + ks[None, :], mask=kmask[None, :], other=0.0)
        w = tl.load(w_e + cols[None, :] * stride_wn + ks[:, None] * stride_wk, mask=cmask[None, :] & kmask[:, None],
                    other=0.0)
        acc = tl.dot(a, w, acc, input_precision="ieee")
    if HAS_BIAS:
        acc += tl.load(b_ptr + e * stride_be + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    if not WEIGHT_ON_INPUT:
        acc *= tl.load(tw_ptr + pair, mask=valid, other=0.0).to(tl.float32)[:, None]
    tl.store(out_ptr + pair[:, None] * stride_out + cols[None, :], acc, mask=valid[:, None] & cmask[None, :])


@triton.jit
def fk_triton_moe_count_kernel(ids_ptr, counts_ptr, n, experts, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    e = tl.load(ids_ptr + offs, mask=offs < n, other=-1)
    ok = (offs < n) & (e >= 0) & (e < experts)
    tl.atomic_add(counts_ptr + tl.where(ok, e, 0), 1, mask=ok)


@triton.jit
def fk_triton_moe_layout_kernel(counts_ptr, starts_ptr, block_expert_ptr, experts, blocks, block_m,
                                E_POW: tl.constexpr, BLOCK: tl.constexpr):
    # One program: each expert's first row (its pairs padded to whole blocks), and the expert of every block
    e = tl.arange(0, E_POW)
    padded = (tl.load(counts_ptr + e, mask=e < experts, other=0) + block_m - 1) // block_m * block_m
    ends = tl.cumsum(padded, 0)
    tl.store(starts_ptr + e, ends - padded, mask=e < experts)
    for b0 in range(0, blocks, BLOCK):
        b = b0 + tl.arange(0, BLOCK)
        owner = tl.sum(((ends[None, :] <= b[:, None] * block_m) & (e[None, :] < experts)).to(tl.int32), axis=1)
        tl.store(block_expert_ptr + b, tl.where(owner < experts, owner, -1), mask=b < blocks)


@triton.jit
def fk_triton_moe_scatter_kernel(ids_ptr, starts_ptr, cursor_ptr, sorted_ptr, n, experts, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    e = tl.load(ids_ptr + offs, mask=offs < n, other=-1)
    ok = (offs < n) & (e >= 0) & (e < experts)
    e = tl.where(ok, e, 0)
    slot = tl.atomic_add(cursor_ptr + e, 1, mask=ok)
    tl.store(sorted_ptr + tl.load(starts_ptr + e, mask=ok, other=0) + slot, offs.to(tl.int64), mask=ok)


def sort_by_expert(topk_ids: torch.Tensor, experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted pair index per row, expert per block of ``block_m`` rows) for the (token, choice) pairs.

    Each expert's pairs fill whole blocks (the rest of its last block holds the sentinel ``T * k``); blocks past
    the last expert's say -1. Sizes depend on shapes only (an upper bound on the blocks), never on the ids. Three
    small kernels (count, layout, scatter): the order of an expert's pairs within its blocks is whichever the atomics
    give, which changes no result (each row of a block is computed on its own).
    """
    ids = topk_ids.reshape(-1)
    n = ids.numel()
    capacity = triton.cdiv(n + min(n, experts) * (block_m - 1), block_m) * block_m
    blocks = capacity // block_m
    counts = torch.zeros(3 * experts, dtype=torch.int32, device=ids.device)  # counts, cursors, starts
    sorted_pairs = torch.full((capacity,), n, dtype=torch.long, device=ids.device)
    block_expert = torch.empty(blocks, dtype=torch.int32, device=ids.device)
    grid = (max(1, triton.cdiv(n, 256)),)
    fk_triton_moe_count_kernel[grid](ids, counts, n, experts, BLOCK=256)
    fk_triton_moe_layout_kernel[(1,)](counts, counts[2 * experts:], block_expert, experts, blocks, block_m,
                                      E_POW=triton.next_power_of_2(experts), BLOCK=64)
    fk_triton_moe_scatter_kernel[grid](ids, counts[2 * experts:], counts[experts:], sorted_pairs, n, experts,
                                       BLOCK=256)
    return sorted_pairs, block_expert


def fused_moe(x, w13, w2, topk_weights, topk_ids, activation: str, apply_router_weight_on_input: bool,
              w13_bias, w2_bias, alpha: float, limit: float, routed_scaling_factor: float) -> torch.Tensor:
    """Slot ``fused_moe`` (see ``fk slots``): x [T, H], w13 [E, 2I, H], w2 [E, H, I] -> [T, H] in x.dtype."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, not {activation!r}")
    (t, h), (experts, _, inter) = x.shape, w2.shape
    k = topk_ids.shape[-1]
    if t * k == 0:
        return torch.zeros_like(x)
    bucket = moe_bucket(t * k, experts)
    block_m = 16 if INTERPRETED else _BUCKETS[bucket]
    sorted_pairs, block_expert = sort_by_expert(topk_ids, experts, block_m)
    blocks = block_expert.numel()
    tw = topk_weights.reshape(-1)
    xs = x if x.stride(-1) == 1 else x.contiguous()
    b13 = w13_bias if w13_bias is not None else w13
    b2 = w2_bias if w2_bias is not None else w2
    acts = torch.empty((sorted_pairs.numel(), inter), dtype=w2.dtype, device=x.device)
    fk_triton_moe_gate_up_kernel[lambda meta: (blocks, triton.cdiv(inter, meta["BLOCK_N"]))](
        xs, w13, b13, tw, sorted_pairs, block_expert, acts, t * k, k, h, inter, xs.stride(0), w13.stride(0),
        w13.stride(1), w13.stride(2), b13.stride(0), acts.stride(0), float(alpha), float(limit), bucket,
        ACT=ACTIVATIONS[activation], WEIGHT_ON_INPUT=bool(apply_router_weight_on_input),
        HAS_BIAS=w13_bias is not None, BLOCK_M=block_m)
    # Each pair's expert output in x's dtype, then one sum over a token's k rows (accumulated in float32 and rounded
    # once), as vLLM's own MoE: a float32 buffer doubled the traffic of the largest tensor of a prefill step.
    per_pair = torch.zeros((t * k, h), dtype=x.dtype, device=x.device)
    fk_triton_moe_down_kernel[lambda meta: (blocks, triton.cdiv(h, meta["BLOCK_N"]))](
        acts, w2, b2, tw, sorted_pairs, block_expert, per_pair, t * k, h, inter, acts.stride(0), w2.stride(0),
        w2.stride(1), w2.stride(2), b2.stride(0), per_pair.stride(0), bucket,
        WEIGHT_ON_INPUT=bool(apply_router_weight_on_input), HAS_BIAS=w2_bias is not None, BLOCK_M=block_m)
    out = per_pair.view(t, k, h).sum(dim=1)
    return out if routed_scaling_factor == 1.0 else out.mul_(routed_scaling_factor)
