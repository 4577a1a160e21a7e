"""Slot ``conv2d``: an implicit-GEMM convolution. Per group, the output pixels (N * OH * OW) are the rows, the group's
output channels the columns and (C/groups) * KH * KW the reduction; each reduction index is decoded into (channel,
kernel row, kernel column) and the input read through x's own strides at the padded, dilated, strided position
(outside the image: zero), so NCHW and channels-last inputs need no copy. float32 accumulation, float32 operands
multiplied in full precision (no TF32)."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fk_adapters.tasks.conv import memory_format, out_size
from fk_triton_kernels.tuning import INTERPRETED


@triton.jit
def fk_triton_conv2d_kernel(x_ptr, w_ptr, b_ptr, y_ptr, H, W, OH, OW, M, KH, KW, CG, OG,
                            sxn, sxc, sxh, sxw, swo, swc, swh, sww, syn, syc, syh, syw,
                            stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, HAS_BIAS: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    g = tl.program_id(2)
    rm = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)  # output pixels
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # output channels within the group
    n, pix = rm // (OH * OW), rm % (OH * OW)
    oh, ow = pix // OW, pix % OW
    o = (g * OG + rn).to(tl.int64)
    k_total = CG * KH * KW
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k_total, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        c, tap = rk // (KH * KW), rk % (KH * KW)
        r, s = tap // KW, tap % KW
        ih = oh[:, None] * stride_h - pad_h + r[None, :] * dil_h
        iw = ow[:, None] * stride_w - pad_w + s[None, :] * dil_w
        inside = (rm[:, None] < M) & (rk[None, :] < k_total) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(x_ptr + n[:, None] * sxn + (g * CG + c[None, :]).to(tl.int64) * sxc + ih * sxh + iw * sxw,
                    mask=inside, other=0.0)
        b = tl.load(w_ptr + o[None, :] * swo + c[:, None] * swc + r[:, None] * swh + s[:, None] * sww,
                    mask=(rn[None, :] < OG) & (rk[:, None] < k_total), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    if HAS_BIAS:
        acc += tl.load(b_ptr + o, mask=rn < OG, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + n[:, None] * syn + o[None, :] * syc + oh[:, None] * syh + ow[:, None] * syw,
             acc.to(y_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < OG))


def conv2d(x, weight, bias, stride, padding, dilation, groups: int) -> torch.Tensor:
    """Slot ``conv2d``: the result in x's memory format (channels-last in, channels-last out)."""
    n, _, h, w = x.shape
    o, cg, kh, kw = weight.shape
    oh, ow = out_size(x.shape, weight.shape, stride, padding, dilation)
    y = torch.empty((n, o, oh, ow), dtype=x.dtype, device=x.device, memory_format=memory_format(x))
    m, og = n * oh * ow, o // groups
    if not y.numel():
        return y
    block_m, block_k = (16, 16) if INTERPRETED else (64, 32)
    block_n = 16 if INTERPRETED else min(64, max(16, triton.next_power_of_2(og)))
    grid = (triton.cdiv(m, block_m), triton.cdiv(og, block_n), groups)
    fk_triton_conv2d_kernel[grid](x, weight, bias if bias is not None else weight, y, h, w, oh, ow, m, kh, kw, cg, og,
                                  *x.stride(), *weight.stride(), *y.stride(), *stride, *padding, *dilation,
                                  HAS_BIAS=bias is not None, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
    return y
