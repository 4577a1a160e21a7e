"""Slot ``paged_attention``: causal GQA over a paged KV cache, one flash-attention style Triton kernel.

One program per (request, tile of BLOCK_M rows, KV head), a row being one (query, query head of that KV head's group),
so the group's heads read each key and value tile once (a decode step's tile holds the whole group): it walks the
request's keys in tiles of BLOCK_N through the block table (only those the tile's queries can see: causal, and the
window when there is one), with an online softmax in float32. Requests are found from ``query_start_loc`` on the
device (no host sync: capturable); ``max_query_len`` only sizes the grid. Any strides for the caches (vLLM's
K|V-interleaved and transposed-K views).
"""
from __future__ import annotations

import triton
import triton.language as tl

from fk_triton_kernels.tuning import INTERPRETED


@triton.jit
def fk_triton_paged_attention_kernel(q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, qsl_ptr, out_ptr, scale, softcap,
                                     window_left, group, block_size, stride_qt, stride_qh, stride_kb, stride_ks,
                                     stride_kh, stride_kd, stride_vb, stride_vs, stride_vh, stride_vd, stride_tb,
                                     stride_ot, stride_oh, D, DV, HAS_WINDOW: tl.constexpr, HAS_CAP: tl.constexpr,
                                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                                     BLOCK_DV: tl.constexpr):
    b, tile, kvh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    q_start = tl.load(qsl_ptr + b)
    n_q = tl.load(qsl_ptr + b + 1) - q_start
    n_keys = tl.load(lens_ptr + b)
    if tile * BLOCK_M >= n_q * group or n_keys == 0:
        return
    # Row r of the tile is query r // group of the request under query head kvh * group + r % group: the heads that
    # share a KV head read each key and value tile once.
    r = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    rows = r // group
    heads = kvh * group + r % group
    row_ok = rows < n_q
    pos = n_keys - n_q + rows  # each query's position among the request's keys
    d, dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
    q_rows = (q_start + rows).to(tl.int64)
    q = tl.load(q_ptr + q_rows[:, None] * stride_qt + heads[:, None] * stride_qh + d[None, :],
                mask=row_ok[:, None] & (d[None, :] < D), other=0.0)
    kvh = kvh.to(tl.int64)
    first_q, last_q = tile * BLOCK_M // group, ((tile + 1) * BLOCK_M - 1) // group
    hi = tl.minimum(n_keys, n_keys - n_q + last_q + 1)  # past the tile's last query: never seen
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(n_keys - n_q + first_q - window_left, 0) // BLOCK_N * BLOCK_N
    # Logits stay unscaled (capped ones scaled) until the running max is taken off: s - m is exact near the max, so
    # large logits (x1000 inputs: ~1e7, an ulp of ~1) lose nothing to a rounded s * scale before the exponent.
    log2_scale = 1.4426950408889634 if HAS_CAP else scale * 1.4426950408889634
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    for start in range(lo, hi, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        key_ok = keys < hi
        blk = tl.load(table_ptr + b * stride_tb + keys // block_size, mask=key_ok, other=0).to(tl.int64)
        slot = (keys % block_size).to(tl.int64)
        k = tl.load(k_ptr + blk[:, None] * stride_kb + slot[:, None] * stride_ks + kvh * stride_kh
                    + d[None, :] * stride_kd, mask=key_ok[:, None] & (d[None, :] < D), other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee").to(tl.float32)
        if HAS_CAP:
            s = s * scale
            s = softcap * (2.0 / (1.0 + tl.exp(-2.0 * s / softcap)) - 1.0)  # softcap * tanh(s / softcap)
        seen = (keys[None, :] <= pos[:, None]) & key_ok[None, :] & row_ok[:, None]
        if HAS_WINDOW:
            seen &= keys[None, :] >= pos[:, None] - window_left
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that has seen nothing yet
        p = tl.exp2((s - m_safe[:, None]) * log2_scale)
        alpha = tl.exp2((m_i - m_safe) * log2_scale)
        v = tl.load(v_ptr + blk[:, None] * stride_vb + slot[:, None] * stride_vs + kvh * stride_vh
                    + dv[None, :] * stride_vd, mask=key_ok[:, None] & (dv[None, :] < DV), other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee").to(tl.float32)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(out_ptr + q_rows[:, None] * stride_ot + heads[:, None] * stride_oh + dv[None, :],
             out.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & (dv[None, :] < DV))


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, max_query_len: int, scale: float,
                    window_left: int, softcap: float, out) -> None:
    """Slot ``paged_attention`` (see ``fk slots``): writes ``out`` [T, Hq, Dv] in place."""
    batch, hq = seq_lens.shape[0], q.shape[1]
    if batch == 0 or max_query_len <= 0:
        return
    d, dv = q.shape[2], v_cache.shape[3]
    hkv = k_cache.shape[2]
    group = hq // hkv
    block_m = 64 if max_query_len * group >= 64 and not INTERPRETED else 16  # decode: the group's heads, one tile
    tiles = {"BLOCK_N": 16} if INTERPRETED else {"BLOCK_N": 64, "num_warps": 4}
    if q.stride(2) != 1:
        q = q.contiguous()
    assert out.stride(2) == 1, "out's last dimension must be contiguous"
    grid = (batch, triton.cdiv(max_query_len * group, block_m), hkv)
    fk_triton_paged_attention_kernel[grid](
        q, k_cache, v_cache, block_table, seq_lens, query_start_loc, out, float(scale), float(softcap),
        int(window_left), group, k_cache.shape[1], q.stride(0), q.stride(1), *k_cache.stride(),
        *v_cache.stride(), block_table.stride(0), out.stride(0), out.stride(1), d, dv,
        HAS_WINDOW=window_left >= 0, HAS_CAP=softcap > 0, BLOCK_M=block_m, BLOCK_D=triton.next_power_of_2(d),
        BLOCK_DV=triton.next_power_of_2(dv), **tiles)

