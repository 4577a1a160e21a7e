"""Slot ``sdpa``: a flash-attention forward. One program per (query block, batch x query head) streams the keys in
blocks with an online softmax in float32; both products take the inputs' own dtype (tensor cores for 16-bit ones,
float32 accumulation; float32 ones in full precision, no TF32) with the probabilities rounded to v's dtype, as
FlashAttention does; a query head reads kv head h // (Hq / Hkv). The mask is read through its
broadcast strides (an expanded view: no copy), additive or boolean; a query that sees no key gets 0."""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from fk_triton_kernels.tuning import INTERPRETED

_NO_MASK, _ADDITIVE, _BOOLEAN = 0, 1, 2


@triton.jit
def fk_triton_sdpa_kernel(q_ptr, k_ptr, v_ptr, m_ptr, o_ptr, L, S, D, H, group, scale,
                          sqb, sqh, sql, sqd, skb, skh, sks, skd, svb, svh, svs, svd, smb, smh, sml, sms,
                          sob, soh, sol, sod, MASK: tl.constexpr, CAUSAL: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    bh = tl.program_id(1)
    b, h = (bh // H).to(tl.int64), (bh % H).to(tl.int64)
    hk = h // group
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    q = tl.load(q_ptr + b * sqb + h * sqh + rm[:, None] * sql + rd[None, :] * sqd,
                mask=(rm[:, None] < L) & (rd[None, :] < D), other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for n0 in range(0, S, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        kt = tl.load(k_ptr + b * skb + hk * skh + rn[None, :] * sks + rd[:, None] * skd,
                     mask=(rn[None, :] < S) & (rd[:, None] < D), other=0.0)
        s = tl.dot(q, kt, input_precision="ieee") * scale
        seen = (rn[None, :] < S) & (rm[:, None] < L)
        if CAUSAL:
            seen = seen & (rn[None, :] <= rm[:, None])
        m_ptrs = m_ptr + b * smb + h * smh + rm[:, None] * sml + rn[None, :] * sms
        if MASK == 1:
            s += tl.load(m_ptrs, mask=seen, other=0.0).to(tl.float32)
        if MASK == 2:
            seen = seen & (tl.load(m_ptrs, mask=seen, other=0) != 0)
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        base = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing seen yet: keep exp() finite
        p = tl.exp(s - base[:, None])
        alpha = tl.exp(m_i - base)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + b * svb + hk * svh + rn[:, None] * svs + rd[None, :] * svd,
                    mask=(rn[:, None] < S) & (rd[None, :] < D), other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_new
    out = tl.where(l_i[:, None] > 0, acc / tl.where(l_i > 0, l_i, 1.0)[:, None], 0.0)
    tl.store(o_ptr + b * sob + h * soh + rm[:, None] * sol + rd[None, :] * sod, out.to(o_ptr.dtype.element_ty),
             mask=(rm[:, None] < L) & (rd[None, :] < D))


def sdpa(q, k, v, attn_mask, is_causal: bool, scale: float) -> torch.Tensor:
    """Slot ``sdpa``: q [B, Hq, L, D], k / v [B, Hkv, S, D], any strides; the result contiguous [B, Hq, L, D]."""
    b, hq, n_q, d = q.shape
    s = k.shape[2]
    out = torch.empty((b, hq, n_q, d), dtype=q.dtype, device=q.device)
    if not out.numel():
        return out
    kind, mask = _NO_MASK, q
    if attn_mask is not None:
        kind = _BOOLEAN if attn_mask.dtype == torch.bool else _ADDITIVE
        mask = attn_mask.view(torch.uint8) if kind == _BOOLEAN else attn_mask
        mask = mask.expand(b, hq, n_q, s)
    args = (q, k, v, mask, out, n_q, s, d, hq, hq // k.shape[1], scale, *q.stride(), *k.stride(), *v.stride(),
            *mask.stride(), *out.stride())
    _launch(args, n_q, b * hq, MASK=kind, CAUSAL=bool(is_causal), BLOCK_D=max(16, triton.next_power_of_2(d)))
    return out


# (BLOCK_M = BLOCK_N, num_stages), widest first: 64 and Triton's default 3 stages for head sizes up to 128 in 16 bits;
# a head size of 256 in bf16 needs 232 KiB of shared memory so (fk46-pi0's Gemma: H100 has 227 KiB)
_TILES = ((16, 1),) if INTERPRETED else ((64, 3), (64, 2), (32, 2), (32, 1), (16, 1))
_FITS: dict = {}  # (dtype, constexprs) -> the first of _TILES whose kernel the GPU took


def _launch(args, n_q: int, programs: int, **meta) -> None:
    """Launch with the widest tiles the device takes: a launch the GPU refuses (``OutOfResources``, raised before
    anything runs) tries the next, and the one that fits is remembered per dtype and constexprs."""
    key = (args[0].dtype, args[0].device, *sorted(meta.items()))
    for block, stages in (_FITS[key],) if key in _FITS else _TILES:
        try:
            fk_triton_sdpa_kernel[(triton.cdiv(n_q, block), programs)](*args, BLOCK_M=block, BLOCK_N=block,
                                                                       num_stages=stages, **meta)
        except OutOfResources:
            continue
        _FITS[key] = (block, stages)
        return
    raise RuntimeError(f"fk-triton sdpa: no tile of {_TILES} fits this device ({meta})")
