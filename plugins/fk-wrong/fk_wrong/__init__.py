"""A deliberately wrong kernel: rms_norm whose reduction covers only the first half of each row.

A classic masking bug: outputs stay finite and of the right scale (each row is off by a
factor near 1), so only a real numerical diff catches it.
"""
import torch

from fk_adapters import Kernel, hookimpl


def wrong_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    half = xf[..., : xf.shape[-1] // 2]
    y = xf * torch.rsqrt(half.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (y.to(x.dtype) * weight).to(x.dtype)


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="rms_norm", fn=wrong_rms_norm, devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, description="reduces over half the row")]
