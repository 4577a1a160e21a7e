"""A deliberately wrong all_reduce: the last rank's contribution is dropped (it sends zeros).

Every rank still gets the same result, so nothing hangs or diverges between ranks: only a numerical diff catches it.
"""
import torch

from fk_adapters import Kernel, groups, hookimpl


def all_reduce_without_last_rank(x: torch.Tensor, group_name: str) -> torch.Tensor:
    group = groups.get(group_name)
    return group.native(torch.zeros_like(x) if group.rank == group.world_size - 1 else x.clone())


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="all_reduce", fn=all_reduce_without_last_rank, devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, description="the last rank's contribution is dropped")]
