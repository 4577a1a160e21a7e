"""Slots ``gated_delta_rule``, ``gated_delta_rule_decode``, ``ssd_chunk_scan`` and ``ssm_state_update``: the gated
delta rule (GDN, KDA's per-key decay) and Mamba2's SSD recurrence over an engine's pool of states, as Triton kernels.

A recurrent scan, not the chunked algorithm: one program per (sequence, value head, block of BLOCK_V state rows)
holds its [BLOCK_V, K] (SSD: [BLOCK_P, N]) tile of the state in float32 registers and walks the sequence's tokens in
order, then stores the tile back in the pool's dtype. Sequences are found on the device (``cu_seqlens``,
``state_indices``, ``has_initial_state`` are read by the kernel; an index < 0 returns at once): no host sync, so every
wrapper is capturable in a CUDA graph. Any strides for the state pool, ``state_indices``, ``has_initial_state``,
``g`` [T, HV], ``beta``, ``dt``, ``A``, ``D`` and ``dt_bias``; q, k, v, KDA's g, x, B, C and ``out`` need a contiguous
last dimension only (the inputs are copied where it is not; ``out`` must have one); ``cu_seqlens`` is contiguous.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

L2_EPS = 1e-6  # the reference's (fk_adapters.tasks.linear_attention.L2_EPS)
_TILE = 4096  # state elements per program: [32, 128] for K = V = 128 (32 registers a thread at 4 warps)


@triton.jit
def _gdn_scan(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, out_ptr, h, bos, eos, hk, hv, v_idx, k_idx, v_ok, k_ok, scale,
              eps, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_gt, stride_gh,
              stride_bt, stride_bh, stride_ot, stride_oh, PER_KEY: tl.constexpr, L2: tl.constexpr):
    """The state tile h [BLOCK_V, BLOCK_K] through tokens bos..eos-1 of value head hv; writes their out rows."""
    t0 = bos.to(tl.int64)
    q_p, k_p = q_ptr + t0 * stride_qt + hk * stride_qh + k_idx, k_ptr + t0 * stride_kt + hk * stride_kh + k_idx
    v_p, o_p = v_ptr + t0 * stride_vt + hv * stride_vh + v_idx, out_ptr + t0 * stride_ot + hv * stride_oh + v_idx
    g_p, b_p = g_ptr + t0 * stride_gt + hv * stride_gh, beta_ptr + t0 * stride_bt + hv * stride_bh
    for _ in range(bos, eos):
        q = tl.load(q_p, mask=k_ok, other=0.0).to(tl.float32)
        k = tl.load(k_p, mask=k_ok, other=0.0).to(tl.float32)
        if L2:
            q = q * tl.rsqrt(tl.sum(q * q, axis=0) + eps)
            k = k * tl.rsqrt(tl.sum(k * k, axis=0) + eps)
        q = q * scale
        if PER_KEY:  # KDA: a decay per key channel
            h = h * tl.exp(tl.load(g_p + k_idx, mask=k_ok, other=0.0).to(tl.float32))[None, :]
        else:
            h = h * tl.exp(tl.load(g_p).to(tl.float32))
        beta = tl.load(b_p).to(tl.float32)
        v = tl.load(v_p, mask=v_ok, other=0.0).to(tl.float32)
        delta = beta * (v - tl.sum(h * k[None, :], axis=1))
        h = h + delta[:, None] * k[None, :]
        o = tl.sum(h * q[None, :], axis=1)
        tl.store(o_p, o.to(out_ptr.dtype.element_ty), mask=v_ok)
        q_p, k_p, v_p, o_p = q_p + stride_qt, k_p + stride_kt, v_p + stride_vt, o_p + stride_ot
        g_p, b_p = g_p + stride_gt, b_p + stride_bt
    return h


@triton.jit
def _initial_state(tile, rows_ok, cols, n_cols, flag_ptr, HAS_INIT: tl.constexpr):
    """A sequence's state tile in float32: from its pool slot, or zeros where its has_initial_state flag is False (the
    slot is then not read)."""
    n_read = n_cols
    if HAS_INIT:
        n_read = n_cols * (tl.load(flag_ptr) != 0).to(tl.int32)
    return tl.load(tile, mask=rows_ok[:, None] & (cols[None, :] < n_read), other=0.0).to(tl.float32)


@triton.jit
def fk_triton_gdn_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, state_ptr, idx_ptr, cu_ptr, init_ptr, out_ptr, scale,
                         eps, group, K, V, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                         stride_gt, stride_gh, stride_bt, stride_bh, stride_ss, stride_sh, stride_sv, stride_sk,
                         stride_idx, stride_init, stride_ot, stride_oh, PER_KEY: tl.constexpr, L2: tl.constexpr,
                         HAS_INIT: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr):
    n, hv, vb = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    s = tl.load(idx_ptr + n * stride_idx).to(tl.int64)
    if s < 0:
        return
    bos, eos = tl.load(cu_ptr + n), tl.load(cu_ptr + n + 1)
    v_idx, k_idx = vb * BLOCK_V + tl.arange(0, BLOCK_V), tl.arange(0, BLOCK_K)
    v_ok, k_ok = v_idx < V, k_idx < K
    tile = state_ptr + s * stride_ss + hv * stride_sh + v_idx[:, None] * stride_sv + k_idx[None, :] * stride_sk
    h = _initial_state(tile, v_ok, k_idx, K, init_ptr + n * stride_init, HAS_INIT)
    h = _gdn_scan(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, out_ptr, h, bos, eos, hv // group, hv, v_idx, k_idx, v_ok,
                  k_ok, scale, eps, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_gt,
                  stride_gh, stride_bt, stride_bh, stride_ot, stride_oh, PER_KEY, L2)
    tl.store(tile, h.to(state_ptr.dtype.element_ty), mask=v_ok[:, None] & k_ok[None, :])


@triton.jit
def fk_triton_gdn_decode_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, state_ptr, idx_ptr, out_ptr, scale, eps,
                                group, K, V, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                                stride_gt, stride_gh, stride_bt, stride_bh, stride_ss, stride_sh, stride_sv,
                                stride_sk, stride_idx, stride_ot, stride_oh, PER_KEY: tl.constexpr,
                                L2: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr):
    n, hv, vb = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    s = tl.load(idx_ptr + n * stride_idx).to(tl.int64)
    if s < 0:  # a CUDA-graph pad
        return
    v_idx, k_idx = vb * BLOCK_V + tl.arange(0, BLOCK_V), tl.arange(0, BLOCK_K)
    v_ok, k_ok = v_idx < V, k_idx < K
    tile = state_ptr + s * stride_ss + hv * stride_sh + v_idx[:, None] * stride_sv + k_idx[None, :] * stride_sk
    tile_ok = v_ok[:, None] & k_ok[None, :]
    h = tl.load(tile, mask=tile_ok, other=0.0).to(tl.float32)
    h = _gdn_scan(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, out_ptr, h, n, n + 1, hv // group, hv, v_idx, k_idx, v_ok,
                  k_ok, scale, eps, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_gt,
                  stride_gh, stride_bt, stride_bh, stride_ot, stride_oh, PER_KEY, L2)
    tl.store(tile, h.to(state_ptr.dtype.element_ty), mask=tile_ok)


@triton.jit
def _ssd_scan(x_ptr, dt_ptr, b_ptr, c_ptr, out_ptr, h, bos, eos, hd, grp, a, d_skip, bias, p_idx, n_idx, p_ok, n_ok,
              stride_xt, stride_xh, stride_dt, stride_dh, stride_bt, stride_bg, stride_ct, stride_cg, stride_ot,
              stride_oh, HAS_D: tl.constexpr):
    """The state tile h [BLOCK_P, BLOCK_N] through tokens bos..eos-1 of head hd (B/C group grp); writes out rows."""
    t0 = bos.to(tl.int64)
    x_p, o_p = x_ptr + t0 * stride_xt + hd * stride_xh + p_idx, out_ptr + t0 * stride_ot + hd * stride_oh + p_idx
    b_p, c_p = b_ptr + t0 * stride_bt + grp * stride_bg + n_idx, c_ptr + t0 * stride_ct + grp * stride_cg + n_idx
    dt_p = dt_ptr + t0 * stride_dt + hd * stride_dh
    for _ in range(bos, eos):
        dt = tl.load(dt_p).to(tl.float32) + bias
        dt = tl.where(dt > 20.0, dt, tl.log(1.0 + tl.exp(tl.minimum(dt, 20.0))))  # softplus, torch's threshold
        x = tl.load(x_p, mask=p_ok, other=0.0).to(tl.float32)
        b = tl.load(b_p, mask=n_ok, other=0.0).to(tl.float32)
        c = tl.load(c_p, mask=n_ok, other=0.0).to(tl.float32)
        h = h * tl.exp(dt * a) + (dt * x)[:, None] * b[None, :]
        y = tl.sum(h * c[None, :], axis=1)
        if HAS_D:
            y = y + d_skip * x
        tl.store(o_p, y.to(out_ptr.dtype.element_ty), mask=p_ok)
        x_p, o_p, b_p, c_p, dt_p = x_p + stride_xt, o_p + stride_ot, b_p + stride_bt, c_p + stride_ct, dt_p + stride_dt
    return h


@triton.jit
def fk_triton_ssd_kernel(x_ptr, dt_ptr, a_ptr, b_ptr, c_ptr, d_ptr, bias_ptr, state_ptr, idx_ptr, cu_ptr, init_ptr,
                         out_ptr, group, P, N, stride_a, stride_d, stride_bias, stride_xt, stride_xh, stride_dt,
                         stride_dh, stride_bt, stride_bg, stride_ct, stride_cg, stride_ss, stride_sh, stride_sp,
                         stride_sn, stride_idx, stride_init, stride_ot, stride_oh, HAS_D: tl.constexpr,
                         HAS_INIT: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    n, hd, pb = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    s = tl.load(idx_ptr + n * stride_idx).to(tl.int64)
    if s < 0:
        return
    bos, eos = tl.load(cu_ptr + n), tl.load(cu_ptr + n + 1)
    p_idx, n_idx = pb * BLOCK_P + tl.arange(0, BLOCK_P), tl.arange(0, BLOCK_N)
    p_ok, n_ok = p_idx < P, n_idx < N
    tile = state_ptr + s * stride_ss + hd * stride_sh + p_idx[:, None] * stride_sp + n_idx[None, :] * stride_sn
    h = _initial_state(tile, p_ok, n_idx, N, init_ptr + n * stride_init, HAS_INIT)
    a = tl.load(a_ptr + hd * stride_a).to(tl.float32)
    d_skip = tl.load(d_ptr + hd * stride_d).to(tl.float32)  # unused where HAS_D is False (d_ptr is then A)
    bias = tl.load(bias_ptr + hd * stride_bias).to(tl.float32)
    h = _ssd_scan(x_ptr, dt_ptr, b_ptr, c_ptr, out_ptr, h, bos, eos, hd, hd // group, a, d_skip, bias, p_idx, n_idx,
                  p_ok, n_ok, stride_xt, stride_xh, stride_dt, stride_dh, stride_bt, stride_bg, stride_ct,
                  stride_cg, stride_ot, stride_oh, HAS_D)
    tl.store(tile, h.to(state_ptr.dtype.element_ty), mask=p_ok[:, None] & n_ok[None, :])


@triton.jit
def fk_triton_ssm_update_kernel(x_ptr, dt_ptr, a_ptr, b_ptr, c_ptr, d_ptr, bias_ptr, state_ptr, idx_ptr, out_ptr,
                                group, P, N, stride_a, stride_d, stride_bias, stride_xt, stride_xh, stride_dt,
                                stride_dh, stride_bt, stride_bg, stride_ct, stride_cg, stride_ss, stride_sh,
                                stride_sp, stride_sn, stride_idx, stride_ot, stride_oh, HAS_D: tl.constexpr,
                                BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    n, hd, pb = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    s = tl.load(idx_ptr + n * stride_idx).to(tl.int64)
    if s < 0:  # a CUDA-graph pad
        return
    p_idx, n_idx = pb * BLOCK_P + tl.arange(0, BLOCK_P), tl.arange(0, BLOCK_N)
    p_ok, n_ok = p_idx < P, n_idx < N
    tile = state_ptr + s * stride_ss + hd * stride_sh + p_idx[:, None] * stride_sp + n_idx[None, :] * stride_sn
    tile_ok = p_ok[:, None] & n_ok[None, :]
    h = tl.load(tile, mask=tile_ok, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + hd * stride_a).to(tl.float32)
    d_skip = tl.load(d_ptr + hd * stride_d).to(tl.float32)  # unused where HAS_D is False (d_ptr is then A)
    bias = tl.load(bias_ptr + hd * stride_bias).to(tl.float32)
    h = _ssd_scan(x_ptr, dt_ptr, b_ptr, c_ptr, out_ptr, h, n, n + 1, hd, hd // group, a, d_skip, bias, p_idx, n_idx,
                  p_ok, n_ok, stride_xt, stride_xh, stride_dt, stride_dh, stride_bt, stride_bg, stride_ct,
                  stride_cg, stride_ot, stride_oh, HAS_D)
    tl.store(tile, h.to(state_ptr.dtype.element_ty), mask=tile_ok)


def _blocks(rows: int, cols: int) -> tuple[int, int]:
    """(BLOCK_ROWS, BLOCK_COLS): all of a state row's columns, and as many rows as keep the tile at _TILE elements."""
    block_cols = triton.next_power_of_2(cols)
    return min(triton.next_power_of_2(rows), max(1, _TILE // block_cols)), block_cols


def _last_contiguous(t):
    """``t`` itself where its last dimension is contiguous (any other strides), else a contiguous copy."""
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def _flags(has_initial_state):
    """The bool flags as bytes (a view: no copy, no sync)."""
    return has_initial_state.view(torch.uint8) if has_initial_state.dtype == torch.bool else has_initial_state


def _gdn_args(q, k, v, g, beta, out):
    q, k, v = (_last_contiguous(t) for t in (q, k, v))
    g = _last_contiguous(g) if g.dim() == 3 else g  # [T, HV]: one element a (token, head), any strides
    assert out.stride(-1) == 1, "out's last dimension must be contiguous"
    return q, k, v, g, (q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), g.stride(0),
                        g.stride(1), beta.stride(0), beta.stride(1))


def gated_delta_rule(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, scale: float,
                     use_qk_l2norm: bool, out) -> None:
    """Slot ``gated_delta_rule`` (see ``fk slots``): writes ``state`` [S, HV, V, K] and ``out`` [T, HV, V] in place."""
    rows, hv, dv, dk = state_indices.shape[0], v.shape[1], v.shape[2], q.shape[2]
    if rows == 0 or q.shape[0] == 0:
        return
    q, k, v, g, strides = _gdn_args(q, k, v, g, beta, out)
    block_v, block_k = _blocks(dv, dk)
    assert cu_seqlens.stride(0) == 1, "cu_seqlens must be contiguous"
    init = state_indices if has_initial_state is None else _flags(has_initial_state)
    fk_triton_gdn_kernel[(rows, hv, triton.cdiv(dv, block_v))](
        q, k, v, g, beta, state, state_indices, cu_seqlens, init, out, float(scale), L2_EPS, hv // q.shape[1], dk, dv,
        *strides, *state.stride(), state_indices.stride(0), init.stride(0), out.stride(0), out.stride(1),
        PER_KEY=g.dim() == 3, L2=bool(use_qk_l2norm), HAS_INIT=has_initial_state is not None, BLOCK_V=block_v,
        BLOCK_K=block_k, num_warps=4)


def gated_delta_rule_decode(q, k, v, g, beta, state, state_indices, scale: float, use_qk_l2norm: bool,
                            out) -> None:
    """Slot ``gated_delta_rule_decode``: one token per sequence, ``state`` and ``out`` [R, HV, V] in place;
    capturable (nothing read on the host)."""
    rows, hv, dv, dk = state_indices.shape[0], v.shape[1], v.shape[2], q.shape[2]
    if rows == 0:
        return
    q, k, v, g, strides = _gdn_args(q, k, v, g, beta, out)
    block_v, block_k = _blocks(dv, dk)
    fk_triton_gdn_decode_kernel[(rows, hv, triton.cdiv(dv, block_v))](
        q, k, v, g, beta, state, state_indices, out, float(scale), L2_EPS, hv // q.shape[1], dk, dv, *strides,
        *state.stride(), state_indices.stride(0), out.stride(0), out.stride(1), PER_KEY=g.dim() == 3,
        L2=bool(use_qk_l2norm), BLOCK_V=block_v, BLOCK_K=block_k, num_warps=4)


def _ssd_args(x, dt, B, C, out):
    x, B, C = (_last_contiguous(t) for t in (x, B, C))
    assert out.stride(-1) == 1, "out's last dimension must be contiguous"
    return x, B, C, (x.stride(0), x.stride(1), dt.stride(0), dt.stride(1), B.stride(0), B.stride(1), C.stride(0),
                     C.stride(1))


def _head_strides(A, D, dt_bias):
    return A.stride(0), A.stride(0) if D is None else D.stride(0), dt_bias.stride(0)


def ssd_chunk_scan(x, dt, A, B, C, D, dt_bias, state, state_indices, cu_seqlens, has_initial_state, out) -> None:
    """Slot ``ssd_chunk_scan`` (see ``fk slots``): writes ``state`` [S, H, P, N] and ``out`` [T, H, P] in place."""
    rows, heads, dp, dn = state_indices.shape[0], x.shape[1], x.shape[2], B.shape[2]
    if rows == 0 or x.shape[0] == 0:
        return
    x, B, C, strides = _ssd_args(x, dt, B, C, out)
    block_p, block_n = _blocks(dp, dn)
    assert cu_seqlens.stride(0) == 1, "cu_seqlens must be contiguous"
    init = state_indices if has_initial_state is None else _flags(has_initial_state)
    fk_triton_ssd_kernel[(rows, heads, triton.cdiv(dp, block_p))](
        x, dt, A, B, C, A if D is None else D, dt_bias, state, state_indices, cu_seqlens, init, out,
        heads // B.shape[1], dp, dn, *_head_strides(A, D, dt_bias), *strides, *state.stride(),
        state_indices.stride(0), init.stride(0), out.stride(0), out.stride(1), HAS_D=D is not None,
        HAS_INIT=has_initial_state is not None, BLOCK_P=block_p, BLOCK_N=block_n, num_warps=4)


def ssm_state_update(x, dt, A, B, C, D, dt_bias, state, state_indices, out) -> None:
    """Slot ``ssm_state_update``: one token per sequence, ``state`` and ``out`` [R, H, P] in place; capturable
    (nothing read on the host)."""
    rows, heads, dp, dn = state_indices.shape[0], x.shape[1], x.shape[2], B.shape[2]
    if rows == 0:
        return
    x, B, C, strides = _ssd_args(x, dt, B, C, out)
    block_p, block_n = _blocks(dp, dn)
    fk_triton_ssm_update_kernel[(rows, heads, triton.cdiv(dp, block_p))](
        x, dt, A, B, C, A if D is None else D, dt_bias, state, state_indices, out, heads // B.shape[1], dp, dn,
        *_head_strides(A, D, dt_bias), *strides, *state.stride(), state_indices.stride(0), out.stride(0),
        out.stride(1), HAS_D=D is not None, BLOCK_P=block_p, BLOCK_N=block_n, num_warps=4)
