"""A deliberately wrong gemm: y = x @ weight.T (+ bias), then columns 0..63 shifted by a tenth of the output's std.

A tile-offset bug (one column block reads a stale bias): the result stays finite, of the right scale and
right almost everywhere, so only a real numerical diff catches it.
"""
import torch

from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks.gemm import gemm

WRONG_COLUMNS = 64
SHIFT = 0.1  # of the output's std: 1e-2 hid inside bf16's noise end to end on an H100 (fk46-llama-3.1)


def off_block_gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = gemm(x, weight, bias)
    if y.numel() > 1:
        y[..., :WRONG_COLUMNS] += (SHIFT * y.float().std()).to(y.dtype)
    return y


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="gemm", fn=off_block_gemm, devices=("cuda", "cpu"), cuda_graph_safe=True, compile_safe=True,
                   description="columns 0..63 off by 0.1 of the output's std")]
