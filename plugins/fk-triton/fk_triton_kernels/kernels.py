"""Triton kernels for the fk-adapters catalog slots, and launchers in the slots' exact interfaces.

All math is float32 inside the kernels; results are cast back to the tensors' dtypes. Rows may
be strided (only the last dimension has to be contiguous), so a query sliced out of a fused qkv
tensor is read and written in place through its row stride. Launchers never synchronize with
the host (no ``.item()``, no ``.cpu()``), so they can be captured in CUDA graphs.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

_SQRT1_2 = tl.constexpr(0.7071067811865476)  # 1/sqrt(2), exact gelu
_GELU_TANH_K = tl.constexpr(0.7978845608028654)  # sqrt(2/pi), tanh gelu
_ACT_MAX_BLOCK = 1024


# ----------------------------------------------------------------------------- device kernels

@triton.jit
def fk_triton_rms_norm_kernel(x_ptr, w_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, eps,
                              BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / n_cols
    y = x * tl.math.rsqrt(var + eps)
    # Round the normalized value to the output dtype before the weight, like the reference.
    y = y.to(out_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_row_stride + cols, (y * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fk_triton_gated_rms_norm_kernel(x_ptr, z_ptr, w_ptr, out_ptr, x_row_stride, z_row_stride, group_size, eps,
                                    BLOCK: tl.constexpr):
    """One (row, channel group): g = x * silu(z), normalized over the group, rounded, times the weight."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * group_size + tl.arange(0, BLOCK)
    mask = tl.arange(0, BLOCK) < group_size
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + row * z_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    g = x * z * tl.sigmoid(z)
    y = g * tl.math.rsqrt(tl.sum(g * g, axis=0) / group_size + eps)
    y = y.to(out_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * tl.num_programs(1) * group_size + cols, (y * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fk_triton_fused_add_rms_norm_kernel(x_ptr, res_ptr, w_ptr, x_row_stride, res_row_stride, n_cols, eps,
                                        BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x_ptrs = x_ptr + row * x_row_stride + cols
    res_ptrs = res_ptr + row * res_row_stride + cols
    s = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32) + tl.load(res_ptrs, mask=mask, other=0.0).to(tl.float32)
    s = s.to(res_ptr.dtype.element_ty)
    tl.store(res_ptrs, s, mask=mask)
    s = s.to(tl.float32)  # normalize the stored (rounded) residual
    var = tl.sum(s * s, axis=0) / n_cols
    y = (s * tl.math.rsqrt(var + eps)).to(res_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (y * w).to(res_ptr.dtype.element_ty)
    tl.store(x_ptrs, y.to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fk_triton_silu_and_mul_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, d, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    x_row = x_ptr + row * x_row_stride
    gate = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_row + d + cols, mask=mask, other=0.0).to(tl.float32)
    act = gate / (1.0 + tl.exp(-gate))
    tl.store(out_ptr + row * out_row_stride + cols, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fk_triton_gelu(gate, APPROX_TANH: tl.constexpr):
    """gelu of a float32 block: exact (erf) or the tanh approximation."""
    if APPROX_TANH:
        u = _GELU_TANH_K * (gate + 0.044715 * gate * gate * gate)
        # tanh(u) = sign(u) * (1 - e) / (1 + e), e = exp(-2|u|): no overflow for any u.
        e = tl.exp(-2.0 * tl.abs(u))
        t = (1.0 - e) / (1.0 + e)
        t = tl.where(u < 0.0, -t, t)
        return 0.5 * gate * (1.0 + t)
    return 0.5 * gate * (1.0 + tl.math.erf(gate * _SQRT1_2))


@triton.jit
def fk_triton_gelu_and_mul_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, d, APPROX_TANH: tl.constexpr,
                                  BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    x_row = x_ptr + row * x_row_stride
    gate = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_row + d + cols, mask=mask, other=0.0).to(tl.float32)
    act = fk_triton_gelu(gate, APPROX_TANH)
    tl.store(out_ptr + row * out_row_stride + cols, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _fk_triton_rotate_heads(base_ptr, head_stride, n_heads, cos, sin, off1, off2, rmask,
                            BLOCK_H: tl.constexpr):
    heads = tl.arange(0, BLOCK_H)
    ptrs = base_ptr + heads[:, None] * head_stride
    mask = (heads[:, None] < n_heads) & rmask[None, :]
    x1 = tl.load(ptrs + off1[None, :], mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(ptrs + off2[None, :], mask=mask, other=0.0).to(tl.float32)
    o1 = x1 * cos[None, :] - x2 * sin[None, :]
    o2 = x2 * cos[None, :] + x1 * sin[None, :]
    tl.store(ptrs + off1[None, :], o1.to(base_ptr.dtype.element_ty), mask=mask)
    tl.store(ptrs + off2[None, :], o2.to(base_ptr.dtype.element_ty), mask=mask)


@triton.jit
def fk_triton_rotary_kernel(pos_ptr, q_ptr, k_ptr, cache_ptr, q_tok_stride, q_head_stride, k_tok_stride,
                            k_head_stride, cache_row_stride, n_q_heads, n_k_heads, half,
                            IS_NEOX: tl.constexpr, HAS_KEY: tl.constexpr, BLOCK_HQ: tl.constexpr,
                            BLOCK_HK: tl.constexpr, BLOCK_R: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    r = tl.arange(0, BLOCK_R)
    rmask = r < half
    cache_row = cache_ptr + pos * cache_row_stride
    cos = tl.load(cache_row + r, mask=rmask, other=0.0).to(tl.float32)
    sin = tl.load(cache_row + half + r, mask=rmask, other=0.0).to(tl.float32)
    if IS_NEOX:
        off1 = r
        off2 = r + half
    else:
        off1 = 2 * r
        off2 = 2 * r + 1
    _fk_triton_rotate_heads(q_ptr + tok * q_tok_stride, q_head_stride, n_q_heads, cos, sin, off1, off2, rmask,
                            BLOCK_H=BLOCK_HQ)
    if HAS_KEY:
        _fk_triton_rotate_heads(k_ptr + tok * k_tok_stride, k_head_stride, n_k_heads, cos, sin, off1, off2, rmask,
                                BLOCK_H=BLOCK_HK)


# ----------------------------------------------------------------------------- layout helpers

def _row_stride(t: torch.Tensor) -> int | None:
    """Stride between logical rows when ``t``'s leading dims flatten to one strided dim, else None.

    The last dim must be contiguous (stride 1) unless it has a single element.
    """
    if t.dim() == 0 or (t.shape[-1] > 1 and t.stride(-1) != 1):
        return None
    lead = [(n, s) for n, s in zip(t.shape[:-1], t.stride()[:-1]) if n != 1]
    for (_, s0), (n1, s1) in zip(lead, lead[1:]):
        if s0 != s1 * n1:
            return None
    return lead[-1][1] if lead else t.shape[-1]


def _rows_in(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Read-only operand: ``(t or a contiguous copy, row stride)``."""
    stride = _row_stride(t)
    if stride is None:
        t = t.contiguous()
        stride = t.shape[-1]
    return t, stride


def _num_warps(block: int) -> int:
    return 4 if block <= 2048 else 8 if block <= 4096 else 16


# ----------------------------------------------------------------------------- slot launchers

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Slot ``rms_norm``: returns x / sqrt(mean(x^2, -1) + eps) * weight in x.dtype."""
    n = x.shape[-1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = x.numel() // n if n else 0
    if rows == 0:
        return out
    src, x_stride = _rows_in(x)
    block = triton.next_power_of_2(n)
    fk_triton_rms_norm_kernel[(rows,)](src, weight.contiguous(), out, x_stride, n, n, eps, BLOCK=block,
                                       num_warps=_num_warps(block))
    return out


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int) -> torch.Tensor:
    """Slot ``gated_rms_norm``: norm(x * silu(z)) per group of ``group_size`` channels, times weight, in x.dtype."""
    n = x.shape[-1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rows = x.numel() // n if n else 0
    if rows == 0:
        return out
    (src, x_stride), (gate, z_stride) = _rows_in(x), _rows_in(z)
    block = triton.next_power_of_2(group_size)
    fk_triton_gated_rms_norm_kernel[(rows, n // group_size)](src, gate, weight.contiguous(), out, x_stride, z_stride,
                                                             group_size, eps, BLOCK=block, num_warps=_num_warps(block))
    return out


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Slot ``fused_add_rms_norm``, in place: residual <- x + residual; x <- rms_norm(residual) * weight."""
    n = x.shape[-1]
    rows = x.numel() // n if n else 0
    if rows == 0:
        return None
    x_stride, r_stride = _row_stride(x), _row_stride(residual)
    x_buf = x if x_stride is not None else x.contiguous()
    r_buf = residual if r_stride is not None else residual.contiguous()
    block = triton.next_power_of_2(n)
    fk_triton_fused_add_rms_norm_kernel[(rows,)](x_buf, r_buf, weight.contiguous(),
                                                 n if x_stride is None else x_stride,
                                                 n if r_stride is None else r_stride, n, eps, BLOCK=block,
                                                 num_warps=_num_warps(block))
    # Layouts whose rows cannot be addressed with one stride went through a copy; write it back.
    if x_buf is not x:
        x.copy_(x_buf)
    if r_buf is not residual:
        residual.copy_(r_buf)
    return None


def _gated(x: torch.Tensor, kernel, **constexprs) -> torch.Tensor:
    d = x.shape[-1] // 2
    out = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    rows = out.numel() // d if d else 0
    if rows == 0:
        return out
    src, x_stride = _rows_in(x)
    block = min(triton.next_power_of_2(d), _ACT_MAX_BLOCK)
    kernel[(rows, triton.cdiv(d, block))](src, out, x_stride, d, d, BLOCK=block, **constexprs)
    return out


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """Slot ``silu_and_mul``: silu(x[..., :d]) * x[..., d:]."""
    return _gated(x, fk_triton_silu_and_mul_kernel)


def gelu_and_mul(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """Slot ``gelu_and_mul``: gelu(x[..., :d]) * x[..., d:], approximate "none" (erf) or "tanh"."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', not {approximate!r}")
    return _gated(x, fk_triton_gelu_and_mul_kernel, APPROX_TANH=approximate == "tanh")


def _heads_layout(t: torch.Tensor, tokens: int, head_size: int) -> tuple[int, int] | None:
    """(token stride, head stride) of ``t`` seen as [tokens, heads, head_size], or None if not addressable."""
    if t.stride(-1) != 1 or t.shape[-1] % head_size:
        return None
    if t.dim() == 2 and t.shape[0] == tokens:
        return t.stride(0), head_size
    if t.dim() == 3 and t.shape[0] == tokens and t.shape[-1] == head_size:
        return t.stride(0), t.stride(1)
    return None


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                     cos_sin_cache: torch.Tensor, is_neox: bool) -> None:
    """Slot ``rotary_embedding``, in place on query [T, Hq*D] and key [T, Hk*D] (key may be None).

    The first rotary_dim = cos_sin_cache.shape[-1] channels of each head rotate, the rest are untouched.
    """
    tokens = positions.numel()
    if tokens == 0:
        return None
    rot = cos_sin_cache.shape[-1]
    half = rot // 2
    pos = positions.reshape(-1)
    cache = cos_sin_cache if cos_sin_cache.stride(-1) == 1 else cos_sin_cache.contiguous()

    bufs, layouts = [], []
    for t in (query, key):
        if t is None:
            bufs.append(None)
            layouts.append((0, 0, 0))
            continue
        lay = _heads_layout(t, tokens, head_size)
        buf = t
        if lay is None:  # unusual layout: rotate a contiguous copy, written back below
            buf = t.reshape(tokens, -1, head_size).contiguous()
            lay = (buf.stride(0), buf.stride(1))
        bufs.append(buf)
        layouts.append((*lay, t.numel() // (tokens * head_size)))
    (q_tok, q_head, n_q), (k_tok, k_head, n_k) = layouts
    q_buf, k_buf = bufs
    has_key = k_buf is not None

    fk_triton_rotary_kernel[(tokens,)](
        pos, q_buf, k_buf if has_key else q_buf, cache, q_tok, q_head, k_tok, k_head, cache.stride(0), n_q, n_k,
        half, IS_NEOX=bool(is_neox), HAS_KEY=has_key, BLOCK_HQ=triton.next_power_of_2(n_q),
        BLOCK_HK=triton.next_power_of_2(max(n_k, 1)), BLOCK_R=triton.next_power_of_2(max(half, 1)))

    if q_buf is not query:
        query.copy_(q_buf.view(query.shape))
    if has_key and k_buf is not key:
        key.copy_(k_buf.view(key.shape))
    return None
