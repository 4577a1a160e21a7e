"""A deliberately wrong conv2d: the last input channel of every group is left out (a loop over C/groups one
short). Finite, of the right scale and shape: only a numerical diff catches it. (A depthwise conv, one channel per
group, comes out zero.)"""
import torch

from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks.conv import conv2d


def short_channel_conv2d(x, weight, bias, stride, padding, dilation, groups) -> torch.Tensor:
    w = weight.clone()
    w[:, -1] = 0
    return conv2d(x, w, bias, stride, padding, dilation, groups)


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="conv2d", fn=short_channel_conv2d, devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, description="the last input channel of each group ignored")]
