"""A deliberately wrong gated_rms_norm: the gate applied after the norm (FLA's norm_before_gate order, not Mamba2's).

Right in shape and scale, wrong on every row whose gate is not constant: only a numerical diff catches it.
"""
import torch

from fk_adapters import Kernel, hookimpl


def gate_after_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int):
    xf = x.float()
    groups = xf.view(*xf.shape[:-1], xf.shape[-1] // group_size, group_size)
    y = (groups * torch.rsqrt(groups.pow(2).mean(dim=-1, keepdim=True) + eps)).view(xf.shape)
    return (y * torch.nn.functional.silu(z.float()) * weight.float()).to(x.dtype)


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="gated_rms_norm", fn=gate_after_norm, devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, description="the gate multiplies after the norm")]
