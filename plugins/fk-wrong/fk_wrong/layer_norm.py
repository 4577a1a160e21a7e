"""A deliberately wrong layer_norm: the mean is never taken out (an RMS norm under LayerNorm's name, plus the bias).

Exact on rows of zero mean, wrong on any other: only a numerical diff catches it.
"""
import torch

from fk_adapters import Kernel, hookimpl


def uncentred_layer_norm(x: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="layer_norm", fn=uncentred_layer_norm, devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, description="the mean is not subtracted")]
