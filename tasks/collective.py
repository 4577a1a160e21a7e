"""Collectives of tensor parallelism: the all-reduce that sums the row-parallel layers' partial results."""
from __future__ import annotations

import torch

from fk_adapters import groups
from fk_adapters.tasks.slot import Slot, acc, nbytes

# A decode step and a prefill block of a hidden size 4096 model at TP 2, a small model at TP 4.
ALL_REDUCE_CASES = ({"tokens": 1, "hidden": 4096, "world": 2},
                    {"tokens": 33, "hidden": 4096, "world": 2},
                    {"tokens": 7, "hidden": 896, "world": 4})


def all_reduce(x: torch.Tensor, group_name: str) -> torch.Tensor:
    """out = the sum over the ranks of group ``group_name`` (``fk_adapters.groups.get``) of each rank's ``x``,
    accumulated in float32 (float64 for float64), cast to x.dtype; every rank gets the same result."""
    return acc(groups.get(group_name).all_gather(x)).sum(0).to(x.dtype)


def _all_reduce_inputs(case, dtype, device, gen):
    """Rank 0's x and its group in an in-process world (``groups.world``) whose ranks each hold their own partial
    sum of the same scale."""
    shape = (case["tokens"], case["hidden"])
    xs = [torch.randn(shape, generator=gen).to(device=device, dtype=dtype) for _ in range(case["world"])]
    return xs[0], groups.world(xs)


def _all_reduce_traffic(x, group_name) -> int:
    """A ring all-reduce: each rank sends and receives 2 (W - 1) / W of x, and writes its result."""
    w = groups.get(group_name).world_size
    return 2 * (w - 1) * nbytes(x) // w * 2 + nbytes(x)


ALL_REDUCE = Slot(
    name="all_reduce",
    summary="tensor-parallel all-reduce: the sum over the ranks of each rank's partial result",
    signature="all_reduce(x: Tensor[T, H], group_name: str) -> Tensor[T, H]",
    schema="(Tensor x, str group_name) -> Tensor",
    fake=lambda x, group_name: torch.empty_like(x),
    reference=all_reduce,
    make_inputs=_all_reduce_inputs,
    cases=ALL_REDUCE_CASES,
    traffic=_all_reduce_traffic,
    growth=1,
    untimed=("fk check runs it in one process playing every rank (a thread per rank): it judges the result; the "
             "engine's collective and its speed exist only across real ranks, in an engine run"),
    entries={
        "vllm": ("GroupCoordinator._all_reduce_out_place (vllm.distributed.parallel_state) of the tensor-parallel "
                 "groups (unique_name 'tp:*'), which vLLM's all_reduce op runs on every platform; other groups "
                 "(pipeline, data, expert parallel) stay stock, counted",),
        "sglang": ("GroupCoordinator.all_reduce (sglang.srt.distributed.parallel_state) of the tensor-parallel "
                   "groups ('tp', 'attention_tp', 'moe_tp'), AROUND hook; other groups stay stock, counted",),
    },
    not_entered={"transformers": "one process, no tensor parallelism"},
)
