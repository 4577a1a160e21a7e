"""A deliberately wrong fused_moe: the last of each token's top-k choices contributes nothing (k > 1).

A loop over the choices that stops one short: the output stays finite and of the right order (the first
choices carry most of the router weight), so only a real numerical diff catches it. Top-1 models are unharmed.
"""
import torch

from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks.moe import fused_moe


def last_choice_dropped_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                            topk_ids: torch.Tensor, *rest) -> torch.Tensor:
    ids = topk_ids.clone()
    if ids.shape[-1] > 1:
        ids[..., -1] = -1  # routed nowhere, as a padded row's ids are
    return fused_moe(x, w13, w2, topk_weights, ids, *rest)


@hookimpl
def fk_kernels(engine, device):
    # the reference it wraps finds each expert's tokens with nonzero(): a host sync, no CUDA graph capture
    return [Kernel(slot="fused_moe", fn=last_choice_dropped_moe, devices=("cuda", "cpu"), cuda_graph_safe=False,
                   compile_safe=True, description="drops the last top-k choice of every token")]
