"""Deliberately wrong norms: rms_norm and fused_add_rms_norm that drop their ``eps``.

On N(0, 1) inputs (mean square 1) an eps of 1e-6 moves the result by about 5e-7 of itself, far within
any tolerance, so a check at that scale passes them; at the small scales real activations have, or
wherever the mean square comes near eps, the result is wrong (and an all-zero row divides by zero).
"""
import torch

from fk_adapters import Kernel, hookimpl


def rms_norm_no_eps(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True))
    return (y.to(x.dtype) * weight).to(x.dtype)


def fused_add_rms_norm_no_eps(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    residual.copy_((x.float() + residual.float()).to(residual.dtype))
    x.copy_(rms_norm_no_eps(residual, weight, eps))


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="rms_norm", fn=rms_norm_no_eps, devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, description="drops eps"),
            Kernel(slot="fused_add_rms_norm", fn=fused_add_rms_norm_no_eps, devices=("cuda", "cpu"),
                   cuda_graph_safe=True, compile_safe=True, description="drops eps")]
