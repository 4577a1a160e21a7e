"""transformers' own math for each slot it hosts, in the slot's interface (what a passthrough plugin routes to).

Op for op what the HF modules compute (``LlamaRMSNorm.forward``, ``act_fn(gate_proj(x)) * up_proj(x)``,
``nn.Linear.forward``; for ``fused_moe`` the experts module's own forward, ``experts.native``), so a passthrough run
gives the stock model's outputs bit for bit. The gate and up halves are made contiguous first,
as HF's separate projections are: elementwise kernels then see the very same layout.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fk_adapters.engines.transformers.experts import native as fused_moe


def rms_norm(x, weight, eps):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _halves(x):
    d = x.shape[-1] // 2
    return x[..., :d].contiguous(), x[..., d:].contiguous()


def silu_and_mul(x):
    gate, up = _halves(x)
    return F.silu(gate) * up


def gelu_and_mul(x, approximate):
    gate, up = _halves(x)
    return F.gelu(gate, approximate=approximate) * up


def gemm(x, weight, bias):
    return F.linear(x, weight, bias)


NATIVES = {"rms_norm": rms_norm, "silu_and_mul": silu_and_mul, "gelu_and_mul": gelu_and_mul, "gemm": gemm,
           "fused_moe": fused_moe}
