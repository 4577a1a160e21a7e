"""Rotary position embedding, applied in place to query and key."""
from __future__ import annotations

import torch

from fk_adapters.tasks.slot import Slot, acc, nbytes

ROPE_CASES = tuple(
    dict(c, is_neox=neox)
    for c in ({"tokens": 1, "heads": 4, "kv_heads": 2, "head_size": 64, "rotary_dim": 64},
              {"tokens": 13, "heads": 8, "kv_heads": 8, "head_size": 128, "rotary_dim": 128},
              {"tokens": 5, "heads": 4, "kv_heads": 1, "head_size": 64, "rotary_dim": 32})
    for neox in (True, False)
)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    if is_neox:
        x1, x2 = x.chunk(2, dim=-1)
    else:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if is_neox:
        return torch.cat((o1, o2), dim=-1)
    return torch.stack((o1, o2), dim=-1).flatten(-2)


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None, head_size: int,
                     cos_sin_cache: torch.Tensor, is_neox: bool) -> None:
    """In place on query [T, Hq*D] and key [T, Hk*D] (key may be None).

    cos_sin_cache is [max_position, rotary_dim]: cos in the first half, sin in the second.
    The first rotary_dim channels of each head rotate; the rest pass through. neox style
    pairs channel i with i + rotary_dim/2; gptj style pairs 2i with 2i+1. Math in float32.
    """
    rot = cos_sin_cache.shape[-1]
    cos, sin = acc(cos_sin_cache.index_select(0, positions.flatten().long())).chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    for t in (query, key):
        if t is None:
            continue
        heads = t.view(t.shape[0], -1, head_size)
        heads[..., :rot] = _rotate(acc(heads[..., :rot]), cos, sin, is_neox).to(t.dtype)


def _rope_inputs(case, dtype, device, gen):
    t, d, rot = case["tokens"], case["head_size"], case["rotary_dim"]
    max_pos = 4096
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv_freq)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(device=device, dtype=dtype)
    positions = torch.randint(0, max_pos, (t,), generator=gen).to(device)
    q = torch.randn(t, case["heads"] * d, generator=gen).to(device=device, dtype=dtype)
    k = torch.randn(t, case["kv_heads"] * d, generator=gen).to(device=device, dtype=dtype)
    return (positions, q, k, d, cache, case["is_neox"])


def _rope_traffic(positions, query, key, head_size, cos_sin_cache, is_neox) -> int:
    """The rotated part of query and key read and written, positions and one cache row per token read."""
    part = cos_sin_cache.shape[-1] / head_size
    rotated = int(2 * part * (nbytes(query) + nbytes(key)))
    return rotated + nbytes(positions) + positions.numel() * cos_sin_cache.shape[-1] * cos_sin_cache.element_size()


ROTARY_EMBEDDING = Slot(
    name="rotary_embedding",
    summary="rotary position embedding (neox and gptj styles, partial rotary), in place",
    signature=("rotary_embedding(positions: Tensor[T] int64, query: Tensor[T, Hq*D], key: Tensor[T, Hk*D] | None, "
               "head_size: int, cos_sin_cache: Tensor[P, R], is_neox: bool) -> None"),
    schema=("(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, Tensor cos_sin_cache, "
            "bool is_neox) -> ()"),
    reference=rotary_embedding,
    make_inputs=_rope_inputs,
    traffic=_rope_traffic,
    cases=ROPE_CASES,
    mutates=("query", "key"),
    dtype_arg=1,
    entries={
        "vllm": ("CustomOp 'RotaryEmbedding' and its subclasses that keep its forward "
                 "(e.g. Llama3RotaryEmbedding) (vllm.model_executor.layers.rotary_embedding); a RoPE layer whose "
                 "attention applies RoPE in its own fused kernel (Qwen3-Next on CUDA: fused_qk_rmsnorm_rope_gate) "
                 "is never called and counts as left stock",),
        "sglang": ("RotaryEmbedding.forward_cuda (sglang.srt.layers.rotary_embedding)",),
    },
)
