"""vLLM's own kernels for each slot, in the slot's interface (what a passthrough plugin routes to)."""
from __future__ import annotations

import torch


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


NATIVES = {f.__name__: f for f in (rms_norm, fused_add_rms_norm, silu_and_mul, gelu_and_mul, rotary_embedding)}
