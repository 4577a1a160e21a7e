"""Slot ``gemm``: y = x @ weight.T (+ bias), a tiled Triton matmul accumulating in float32.

float32 operands multiply in full precision (``input_precision="ieee"``, no TF32), so a float32 model stays
within float32 rounding of the reference. The tile shape is autotuned per (N, K, dtypes) and per bucket of the
token count (<= 16, <= 64, <= 256, more; outputs of at most 32 columns have their own buckets), among that
bucket's tiles: a new batch size in a seen bucket reuses the tuned config (no benchmarking inside a CUDA graph
capture once the engine's warm-up has run each bucket).
Interpreted (``TRITON_INTERPRET=1``) there is one config and no tuning.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from fk_triton_kernels.tuning import INTERPRETED, bucket_tuned

# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) per token-count bucket: few rows -> narrow, deep tiles, so that the
# weight (the traffic of a decode step) streams through every SM (N = 4096 in tiles of 64 is 64 programs for 132 SMs:
# 0.84x cuBLAS at 31 tokens in session 27, hence the 32-wide tiles); many rows -> wide tiles for the tensor cores.
_BUCKET_TILES = {
    16: ((16, 32, 256, 4, 4), (16, 64, 128, 4, 4), (16, 64, 256, 4, 3), (16, 128, 128, 4, 4)),
    64: ((32, 64, 128, 4, 4), (64, 64, 128, 4, 4), (32, 128, 128, 4, 4), (64, 128, 64, 4, 4), (32, 32, 256, 4, 3),
         (32, 32, 128, 4, 4)),
    256: ((64, 128, 64, 4, 4), (128, 128, 64, 8, 3), (64, 256, 64, 8, 3), (128, 64, 64, 4, 4)),
    1 << 30: ((128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4)),
}
# Outputs of at most NARROW_N columns (a MoE router, N = experts) stream x once: a wide column tile would be mostly
# masked and leave too few programs to fill the SMs, so their buckets try BLOCK_N = 16 and row tiles small enough
# that many programs share the read of x.
NARROW_N = 32
_NARROW_TILES = {
    16: ((16, 16, 256, 4, 3), (16, 16, 512, 4, 3), (16, 32, 256, 4, 3)),
    256: ((16, 16, 256, 4, 3), (32, 16, 256, 4, 3), (64, 16, 128, 4, 4)),
    1 << 30: ((32, 16, 256, 4, 3), (64, 16, 128, 4, 4), (64, 16, 256, 8, 3), (128, 16, 128, 8, 3)),
}
# A bucket's id (the BUCKET constexpr) is its index here.
_BUCKETS = [(b, False) for b in _BUCKET_TILES] + [(b, True) for b in _NARROW_TILES]


def m_bucket(m: int, n: int = NARROW_N + 1) -> int:
    """The bucket the tiles are tuned for (a key of the autotuner, with N and K): the token count's, wide or narrow."""
    narrow = n <= NARROW_N
    return next(i for i, (b, nar) in enumerate(_BUCKETS) if nar == narrow and m <= b)


def _tiles(bucket: int) -> tuple:
    bound, narrow = _BUCKETS[bucket]
    return (_NARROW_TILES if narrow else _BUCKET_TILES)[bound]


def _configs() -> list:
    if INTERPRETED:
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4, "BUCKET": 0})]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": 8, "BUCKET": b}, num_warps=w,
                          num_stages=s) for b in range(len(_BUCKETS)) for m, n, k, w, s in _tiles(b)]


@bucket_tuned(_configs(), ["N", "K"])
@triton.jit
def fk_triton_gemm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                          stride_ym, M_BUCKET, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, BUCKET: tl.constexpr):
    # Grouped launch order: GROUP_M row tiles share each weight column tile while it is in L2.
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * tiles_n)) % rows_in_group
    pid_n = (pid % (GROUP_M * tiles_n)) // rows_in_group

    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * stride_xm + ks[None, :] * stride_xk,
                    mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * stride_wn + ks[:, None] * stride_wk,
                    mask=(rn[None, :] < N) & (ks[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Slot ``gemm``: x [..., K] @ weight[N, K].T (+ bias[N]) in x.dtype; any strides."""
    k = x.shape[-1]
    n = weight.shape[0]
    m = math.prod(x.shape[:-1])
    x2 = x.reshape(m, k)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m and n:
        def grid(meta):
            return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

        fk_triton_gemm_kernel[grid](x2, weight, bias if bias is not None else weight, y, m, n, k, x2.stride(0),
                                    x2.stride(1), weight.stride(0), weight.stride(1), y.stride(0), m_bucket(m, n),
                                    HAS_BIAS=bias is not None)
    return y.reshape(*x.shape[:-1], n)
