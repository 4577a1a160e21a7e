"""Scaled dot-product attention over dense [B, H, L, D] tensors, as transformers' "sdpa" attention calls it."""
from __future__ import annotations

import torch

from fk_adapters.tasks.slot import Slot, acc, nbytes

# An encoder (no mask), a causal decoder prefill with GQA, a padded batch's additive mask broadcast over heads, a
# boolean mask with a fully masked query row, a causal mask over more keys than queries (top-left), MQA decode.
SDPA_CASES = (
    {"b": 2, "hq": 4, "hkv": 4, "l": 17, "s": 17, "d": 32},
    {"b": 1, "hq": 8, "hkv": 2, "l": 24, "s": 24, "d": 64, "causal": True},
    {"b": 2, "hq": 4, "hkv": 2, "l": 9, "s": 9, "d": 32, "mask": "additive"},
    {"b": 2, "hq": 2, "hkv": 2, "l": 6, "s": 10, "d": 16, "mask": "bool"},
    {"b": 1, "hq": 4, "hkv": 4, "l": 5, "s": 12, "d": 32, "causal": True, "mask": "bool"},
    {"b": 3, "hq": 8, "hkv": 1, "l": 1, "s": 40, "d": 128},
    {"b": 1, "hq": 2, "hkv": 1, "l": 70, "s": 70, "d": 256, "causal": True},  # Gemma's (PaliGemma: fk46-pi0)
)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None, is_causal: bool,
         scale: float) -> torch.Tensor:
    """out[b, h, i] = sum_j softmax_j(scale * q[b, h, i].k[b, h // (Hq / Hkv), j] + m[b, h, i, j]) v[b, h // (Hq /
    Hkv), j]. ``attn_mask`` broadcasts to [B, Hq, L, S]: additive (added to the scores) or boolean (False: key
    hidden). ``is_causal``: key j hidden from query i when j > i (top-left aligned, as torch's), together with the
    mask. A query that sees no key gets 0. Float32 math (float64 for float64), cast to q.dtype."""
    group = q.shape[1] // k.shape[1]
    kf, vf = (acc(t).repeat_interleave(group, dim=1) for t in (k, v))
    scores = torch.einsum("bhld,bhsd->bhls", acc(q), kf) * scale
    seen = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device)
    if is_causal:
        seen = seen.tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        seen = seen & attn_mask
    elif attn_mask is not None:
        scores = scores + acc(attn_mask)
    scores = scores.masked_fill(~seen, float("-inf"))
    probs = scores.softmax(dim=-1).nan_to_num(0.0)  # a row of -inf only: 0
    return torch.einsum("bhls,bhsd->bhld", probs, vf).to(q.dtype)


def _mask(case, gen):
    b, n_q, s = case["b"], case["l"], case["s"]
    if case.get("mask") == "additive":  # padding at the end of batch row 1, as transformers builds it (dtype min)
        m = torch.zeros(b, 1, n_q, s)
        m[1, ..., s - 3:] = torch.finfo(torch.float32).min
        return m + 0.5 * torch.randn(b, 1, n_q, s, generator=gen)  # and a bias, as a relative position table gives
    if case.get("mask") == "bool":
        m = torch.rand(b, 1, n_q, s, generator=gen) > 0.3
        m[0, :, 1] = False  # batch row 0, query 1 sees nothing
        m[..., 0, 0] = True  # query 0 keeps one key even when causal
        return m
    return None


def _sdpa_inputs(case, dtype, device, gen):
    b, n_q, s, d = case["b"], case["l"], case["s"], case["d"]
    q = torch.randn(b, case["hq"], n_q, d, generator=gen)
    k, v = (torch.randn(b, case["hkv"], s, d, generator=gen) for _ in range(2))
    m = _mask(case, gen)
    q, k, v = (t.to(device=device, dtype=dtype) for t in (q, k, v))
    if m is not None:
        m = m.to(device=device, dtype=m.dtype if m.dtype == torch.bool else dtype)
    return q, k, v, m, case.get("causal", False), d ** -0.5


def _pairs(n_q: int, s: int, is_causal: bool) -> int:
    """(query, key) pairs a query block attends before any mask: all, or the top-left lower triangle."""
    if not is_causal:
        return n_q * s
    return sum(min(i + 1, s) for i in range(n_q))


def _flops(q, k, v, attn_mask, is_causal, scale) -> int:
    """2 * D for q.k and 2 * D for p.v per attended (query, key) pair and head; the softmax not counted."""
    return 4 * q.shape[0] * q.shape[1] * q.shape[3] * _pairs(q.shape[2], k.shape[2], is_causal)


def _traffic(q, k, v, attn_mask, is_causal, scale) -> int:
    """q, k, v and the mask (as broadcast: its own elements) read once, the output written once."""
    return 2 * nbytes(q) + nbytes(k) + nbytes(v) + nbytes(attn_mask)


_NOT_IN_LLM_ENGINES = ("its attention runs over the paged KV cache: that is the paged_attention slot "
                       "(dense encoder / vision attention stays stock)")

SDPA = Slot(
    name="sdpa",
    summary="scaled dot-product attention (GQA, additive or boolean mask, causal) over dense [B, H, L, D] tensors",
    signature=("sdpa(q: Tensor[B, Hq, L, D], k: Tensor[B, Hkv, S, D], v: Tensor[B, Hkv, S, D], "
               "attn_mask: Tensor[B|1, Hq|1, L|1, S] | None, is_causal: bool, scale: float) -> Tensor[B, Hq, L, D]"),
    schema="(Tensor q, Tensor k, Tensor v, Tensor? attn_mask, bool is_causal, float scale) -> Tensor",
    fake=lambda q, k, v, attn_mask, is_causal, scale: q.new_empty(q.shape),
    reference=sdpa,
    make_inputs=_sdpa_inputs,
    cases=SDPA_CASES,
    traffic=_traffic,
    flops=_flops,
    entries={
        "transformers": ("the attention function of every model whose attention implementation is 'sdpa': "
                         "registered as 'fk_sdpa' in transformers.AttentionInterface (its masks: sdpa's) and the "
                         "model switched to it; dropout, output_attentions, a position bias, a paged cache or a "
                         "value head size unlike the query's stay stock",
                         "diffusers' attention modules whose processor calls dispatch_attention_fn (FLUX, "
                         "HunyuanVideo-1.5) while its backend is 'native': fk's function registered as the native "
                         "backend in _AttentionBackendRegistry, routed modules marked by a forward pre-hook, every "
                         "other call to diffusers' native; dropout, the log-sum-exp or context parallelism stay "
                         "stock; processors that call F.scaled_dot_product_attention themselves (SDXL's UNet) are "
                         "not entered"),
    },
    not_entered={"vllm": _NOT_IN_LLM_ENGINES,
                 "sglang": _NOT_IN_LLM_ENGINES + "; in SGLang's diffusion runtime (sglang.multimodal_gen) it enters "
                           "FlashAttentionImpl.forward and SDPAImpl.forward, in its diffusion workers only "
                           "(fk_adapters/engines/sglang/diffusion_targets.py)"},
)
