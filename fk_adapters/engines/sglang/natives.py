"""SGLang 0.5.15's own CUDA kernels for each slot, in the slot's interface.

What a passthrough plugin routes to: the kernels ``forward_cuda`` calls on its default
path (sgl_kernel norms, sglang.jit_kernel activations and RoPE). Imported lazily: these
modules exist only where SGLang runs (CUDA). Never call a hooked ``forward_cuda`` here.
"""
from __future__ import annotations

import torch

_FAST_ROPE_HEAD_SIZES = (64, 128, 256, 512)  # forward_cuda's apply_rope path; others use the fallback kernel


def rms_norm(x, weight, eps):
    from sgl_kernel import rmsnorm

    return rmsnorm(x, weight, eps)


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


NATIVES = {f.__name__: f for f in (rms_norm, fused_add_rms_norm, silu_and_mul, gelu_and_mul, rotary_embedding)}
