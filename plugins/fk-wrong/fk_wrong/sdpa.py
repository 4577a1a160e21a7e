"""A deliberately wrong sdpa: the last key is never attended (a loop bound over the keys one short). Every query
that saw it is off, the rest are exact: only a numerical diff catches it, on any model (an encoder without a mask
included)."""
import torch

from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks.sdpa import sdpa


def last_key_dropped_sdpa(q, k, v, attn_mask, is_causal, scale) -> torch.Tensor:
    if k.shape[2] < 2:
        return sdpa(q, k, v, attn_mask, is_causal, scale)
    mask = None if attn_mask is None else attn_mask[..., :-1]
    return sdpa(q, k[:, :, :-1], v[:, :, :-1], mask, is_causal, scale)


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="sdpa", fn=last_key_dropped_sdpa, devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, description="the last key never attended")]
