"""The linear-attention / SSM slots in SGLang 0.5.15: AROUND hooks below the engine's own conv1d and split.

Gated DeltaNet (Qwen3-Next, Qwen3.5): ``TritonGDNKernel.extend`` (prefill; q, k, v, g, beta already made by the
engine) -> ``gated_delta_rule``; ``TritonGDNKernel.packed_decode`` (CUDA decode: the post-conv ``mixed_qkv`` with the
raw gates ``a``, ``b``) and ``.decode`` (where packed decode is off) -> ``gated_delta_rule_decode``, the split and
gating done here in plain torch as the engine's kernels do them. Both read and write SGLang's pool
``[S+1, HV, V, K]`` in place at ``cache_indices`` (-1: a CUDA-graph pad); SGLang has no has_initial_state (a slot is
zeroed when a request gets it), so every sequence starts from its slot. Mamba2 (NemotronH, Falcon-H1,
GraniteMoeHybrid): the module functions ``ssd_combined.mamba_chunk_scan_combined`` (prefill) -> ``ssd_chunk_scan``
over a pool of the call's own initial states (it returns the final states; the engine scatters them), and
``ssu_dispatch.selective_state_update`` (decode) -> ``ssm_state_update`` on the pool at ``state_batch_indices``.

The engine's own kernels chosen (the passthrough) leave each call on stock's path, counted. Stock, counted with why:
mamba radix-cache tracking steps (the engine keeps the chunk states the slots do not
return), ReplaySSM, speculative verify (``target_verify`` is hooked only to count it), z-gated / clamped /
per-channel calls; layers on a non-Triton GDN backend or Kimi-Linear's KDA are counted stock when built.
Pure Python: imports sglang only in ``point_runtime``'s readers. ``docs/design/linear-attention-ssm.md`` has the
seams (section 3) and traps.
"""
from __future__ import annotations

from fk_adapters.engines.sglang.base import Runtime, Stock, Target, own_path

GDN = ("gated_delta_rule", "gated_delta_rule_decode")
SSD = ("ssd_chunk_scan", "ssm_state_update")
_INF = float("inf")


# ----------------------------------------------------------------------------------------------- Gated DeltaNet
def gdn_gates(A_log, a, b, dt_bias, beta_dtype=None):
    """The engine's GDN gating in float32: g = -exp(A_log) softplus(a + dt_bias) (linear above 20, as its kernels),
    beta = sigmoid(b), rounded through ``beta_dtype`` where the engine's kernel rounds it (packed decode and
    ``fused_gdn_gating`` store it in b's dtype)."""
    import torch.nn.functional as F

    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float())
    beta = b.float().sigmoid()
    return g, beta if beta_dtype is None else beta.to(beta_dtype).float()


def _pool_why(ssm_states, num_v_heads=None, head_v_dim=None) -> str:
    if ssm_states.dim() != 4:
        return f"state pool of rank {ssm_states.dim()}, not [S, HV, V, K]"
    hv, v = ssm_states.shape[1:3]
    if num_v_heads is not None and (hv, v) != (num_v_heads, head_v_dim):
        return f"state pool [S, {hv}, {v}, K] for {num_v_heads} value heads of {head_v_dim}"
    return ""


def gdn_built(phase: str):
    """built(layer) for RadixLinearAttention layers: a GDN layer routes where SGLang runs its Triton kernel for
    ``phase``; Kimi-Linear's KDA layers (per-key decay, A_log [1, 1, H, 1]) have their own kernel, not hooked."""

    def built(layer) -> str:
        a_log = getattr(layer, "A_log", None)
        if a_log is None or a_log.dim() != 1:
            return "not a GDN layer (Kimi-Linear's KDA: TritonKDAKernel, not hooked)"
        return Runtime.gdn_backend_why(phase)

    return built


def gdn_extend(ops, kernel, q, k, v, g, beta, ssm_states, cache_indices, query_start_loc):
    """TritonGDNKernel.extend(q, k, v [1, T, H|HV, K|V], g, beta [1, T, HV] float32, *, ssm_states, cache_indices,
    query_start_loc) -> (o [1, T, HV, V], None, h): FLA's chunk kernel in place on the pool, q and k l2-normed inside,
    scale K^-0.5. Routed: ``(o, None, None)``; no chunk states ``h``, so a tracking step stays stock."""
    slot = "gated_delta_rule"
    op = ops.get(slot)
    if op is None:
        return Stock(slot)
    why = (("" if q.dim() == 4 and q.shape[0] == 1 else f"q of shape {tuple(q.shape)}, not varlen [1, T, H, K]")
           or ("" if g.dim() == 3 else "per-key decay g (KDA)")
           or ("" if beta.dim() == 3 else "per-channel beta")
           or ("no query_start_loc" if query_start_loc is None else "")
           or ("" if cache_indices.dim() == 1 else "cache_indices not [R]")
           or _pool_why(ssm_states)
           or Runtime.mamba_track_why())
    if why:
        return Stock(slot, why)
    if stock := own_path(slot):
        return stock
    t, hv, vd, kd = q.shape[1], *ssm_states.shape[1:]
    out = q.new_zeros(t, hv, vd)  # stock returns o in q's dtype
    op(q[0], k[0], v[0], g[0], beta[0], ssm_states, cache_indices, query_start_loc, None, kd ** -0.5, True, out)
    return out[None], None, None


def gdn_packed_decode(ops, kernel, mixed_qkv, a, b, A_log, dt_bias, scale, ssm_states, cache_indices, num_v_heads,
                      head_v_dim, replayssm_d=None, replayssm_k=None, replayssm_g=None, replayssm_write_pos=None,
                      replayssm_force_flush=None):
    """TritonGDNKernel.packed_decode(mixed_qkv [R, 2HK + HV V], a, b [R, HV], *, A_log, dt_bias, scale, ssm_states,
    cache_indices, num_v_heads, head_v_dim, **replayssm) -> [1, R, HV, V]: one token per sequence; H and K inferred
    from the pool as the engine's kernel does; a pad row (index -1) keeps zeros, as stock writes."""
    slot = "gated_delta_rule_decode"
    op = ops.get(slot)
    if op is None:
        return Stock(slot)
    replay = (replayssm_d, replayssm_k, replayssm_g, replayssm_write_pos, replayssm_force_flush)
    why = (("ReplaySSM buffered decode" if any(x is not None for x in replay) else "")
           or _pool_why(ssm_states, num_v_heads, head_v_dim)
           or ("" if mixed_qkv.dim() == 2 and cache_indices.dim() == 1 else "mixed_qkv not [R, qkv] or 2-D indices"))
    if not why:
        hv, vd, kd = ssm_states.shape[1:]
        qk = mixed_qkv.shape[1] - hv * vd
        h = qk // (2 * kd) if qk > 0 and qk % (2 * kd) == 0 else 0
        why = "" if h and hv % h == 0 else f"mixed_qkv width {mixed_qkv.shape[1]} is not 2HK + HV*V with K={kd}"
    if why:
        return Stock(slot, why)
    if stock := own_path(slot):
        return stock
    r = mixed_qkv.shape[0]
    q, k, v = mixed_qkv.split([h * kd, h * kd, hv * vd], dim=-1)
    g, beta = gdn_gates(A_log, a, b, dt_bias, beta_dtype=b.dtype)
    out = mixed_qkv.new_zeros(r, 1, hv, vd)
    op(q.unflatten(-1, (h, kd)), k.unflatten(-1, (h, kd)), v.unflatten(-1, (hv, vd)), g, beta, ssm_states,
       cache_indices, float(scale), True, out[:, 0])
    return out.transpose(0, 1)


def gdn_decode(ops, kernel, q, k, v, a, b, A_log, dt_bias, ssm_states, cache_indices, query_start_loc):
    """TritonGDNKernel.decode(q, k, v [1, R, H|HV, K|V], a, b [R, HV], *, A_log, dt_bias, ssm_states, cache_indices,
    query_start_loc) -> [1, R, HV, V]: the fused sigmoid-gating kernel (beta not rounded), scale K^-0.5. SGLang calls
    it only where packed decode is off (CPU, NPU): fk routes it on CUDA tensors only."""
    slot = "gated_delta_rule_decode"
    op = ops.get(slot)
    if op is None:
        return Stock(slot)
    why = (_device_why(q)
           or ("" if q.dim() == 4 and q.shape[0] == 1 else f"q of shape {tuple(q.shape)}, not [1, R, H, K]")
           or ("" if cache_indices.dim() == 1 and q.shape[1] == cache_indices.shape[0]
               else "not one token per sequence")
           or _pool_why(ssm_states, v.shape[2], v.shape[3]))
    if why:
        return Stock(slot, why)
    if stock := own_path(slot):
        return stock
    g, beta = gdn_gates(A_log, a, b, dt_bias)
    out = v.new_zeros(v.shape[1:])
    op(q[0], k[0], v[0], g, beta, ssm_states, cache_indices, k.shape[-1] ** -0.5, True, out)
    return out[None]


def gdn_verify(ops, kernel, A_log, dt_bias, q, k, v, a, b, ssm_states, cache_indices, query_start_loc,
               intermediate_states_buffer, intermediate_state_indices, cache_steps, retrieve_parent_token):
    """TritonGDNKernel.target_verify(A_log, dt_bias, q, k, v, a, b, *, ...): speculative verify keeps a state per
    draft token and writes none back; no slot takes that, so it is only counted (as the decode slot's)."""
    return Stock("gated_delta_rule_decode", "speculative verify (a state per draft token, no state update)")


def _device_why(t) -> str:
    return "" if t.is_cuda else f"{t.device.type} tensors (fk's SGLang entry is CUDA-only)"


# ------------------------------------------------------------------------------------------------ Mamba2 (SSD)
def ssd_scan(ops, x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
             chunk_indices=None, chunk_offsets=None, cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, _INF), out=None,
             return_final_states=False, return_varlen_states=False, return_intermediate_states=False,
             state_dtype=None):
    """mamba_chunk_scan_combined(x [1, T, H, P], dt [1, T, H], A [H], B, C [1, T, G, N], chunk_size, ...) as
    MambaMixer2.forward calls it: varlen (cu_seqlens), softplus(dt + dt_bias), y = C h + D x into ``out``, returning
    (intermediate states, final states per sequence). The slot runs over a pool of the call's initial states (zeros
    where None) at indices 0..R-1 and returns it; the chunk metadata is the slot's business. Routed only where the
    intermediate states are not needed: the engine reads them on tracking steps only."""
    slot = "ssd_chunk_scan"
    op = ops.get(slot)
    if op is None:
        return Stock(slot)
    why = (("z (gated output)" if z is not None else "")
           or ("" if dt_softplus else "dt without softplus")
           or ("" if tuple(dt_limit) == (0.0, _INF) else f"dt_limit {tuple(dt_limit)}")
           or ("no dt_bias" if dt_bias is None else "")
           or ("" if return_varlen_states and cu_seqlens is not None else "not varlen (no varlen states)")
           or ("final states of the batch requested" if return_final_states else "")
           or ("no out buffer" if out is None else "")
           or ("" if x.dim() == 4 and x.shape[0] == 1 else f"x of shape {tuple(x.shape)}, not [1, T, H, P]")
           or ("D per channel" if D is not None and D.dim() != 1 else "")
           or (Runtime.mamba_track_why() if return_intermediate_states else ""))
    if why:
        return Stock(slot, why)
    if stock := own_path(slot):
        return stock
    r, (_, t, h, p), n = cu_seqlens.shape[0] - 1, x.shape, B.shape[-1]
    dtype = state_dtype or C.dtype  # the stock final states' dtype
    pool = (x.new_zeros(r, h, p, n, dtype=dtype) if initial_states is None
            else initial_states.to(dtype=dtype, copy=True))
    idx = _arange(r, cu_seqlens.device)
    op(x[0], dt[0], A, B[0], C[0], D, dt_bias, pool, idx, cu_seqlens.int(), None, out.view(t, h, p))
    return (None, pool) if return_intermediate_states else pool


def _arange(n: int, device):
    import torch

    return torch.arange(n, dtype=torch.int32, device=device)


def _per_head(t, lead: int):
    """``t`` [H, ...] as [H] where it is an expansion over its trailing dims (stride 0), else None."""
    if all(size == 1 or stride == 0 for size, stride in zip(t.shape[lead:], t.stride()[lead:])):
        return t[(slice(None),) * lead + (0,) * (t.dim() - lead)]
    return None


def ssm_update(ops, state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, state_batch_indices=None,
               pad_slot_id=-1, out=None, disable_state_update=False, intermediate_states_buffer=None, cache_steps=None,
               retrieve_parent_token=None, intermediate_state_indices=None):
    """selective_state_update(state [S, H, P, N], x [R, H, P], dt [R, H, P], A [H, P, N], B, C [R, G, N], D, z,
    dt_bias [H, P], dt_softplus, state_batch_indices [R], pad_slot_id, out [R, H, P], ...) -> None, in place: the
    decode call's per-head dt, A, D and dt_bias are stride-0 expansions over P (and N), handed to the slot per head."""
    slot = "ssm_state_update"
    op = ops.get(slot)
    if op is None:
        return Stock(slot)
    verify = (intermediate_states_buffer, cache_steps, retrieve_parent_token, intermediate_state_indices)
    why = (("speculative verify" if disable_state_update or any(v is not None for v in verify) else "")
           or ("z (gated output)" if z is not None else "")
           or ("" if dt_softplus else "dt without softplus")
           or ("no dt_bias" if dt_bias is None else "")
           or ("no out buffer" if out is None else "")
           or ("no state_batch_indices" if state_batch_indices is None else "")
           or ("" if pad_slot_id == -1 else f"pad_slot_id {pad_slot_id}")
           or ("" if state.dim() == 4 and x.dim() == 3 and dt.dim() == 3 and A.dim() == 3
               else "not one token per sequence on an [S, H, P, N] pool"))
    if why:
        return Stock(slot, why)
    dt_h, a_h, bias_h = _per_head(dt, 2), _per_head(A, 1), _per_head(dt_bias, 1)
    d_h = None if D is None else _per_head(D, 1)
    why = (("dt per channel" if dt_h is None else "") or ("A per channel" if a_h is None else "")
           or ("dt_bias per channel" if bias_h is None else "")
           or ("D per channel" if D is not None and d_h is None else "")
           or Runtime.ssm_rounding_why())
    if why:
        return Stock(slot, why)
    if stock := own_path(slot):
        return stock
    op(x, dt_h, a_h, B, C, d_h, bias_h, state, state_batch_indices, out.view(x.shape))
    return None


# --------------------------------------------------------------------------------------------------- targets
_KERNEL = "sglang.srt.layers.attention.linear.kernels.gdn_triton.TritonGDNKernel"
_RADIX_LINEAR = "sglang.srt.layers.radix_linear_attention.RadixLinearAttention"
_MAMBA = "sglang.srt.layers.attention.mamba."
_MIXER = _MAMBA + "mamba.MambaMixer2"


TARGETS: tuple[Target, ...] = (
    Target(_KERNEL, ("gated_delta_rule",), gdn_extend, method="extend", init_cls=_RADIX_LINEAR,
           built=gdn_built("prefill")),
    Target(_KERNEL, ("gated_delta_rule_decode",), gdn_packed_decode, method="packed_decode", init_cls=_RADIX_LINEAR,
           built=gdn_built("decode")),
    Target(_KERNEL, ("gated_delta_rule_decode",), gdn_decode, method="decode", counts_layers=False),
    Target(_KERNEL, ("gated_delta_rule_decode",), gdn_verify, method="target_verify", counts_layers=False),
    Target(_MAMBA + "ops.ssd_combined", ("ssd_chunk_scan",), ssd_scan, method="mamba_chunk_scan_combined",
           init_cls=_MIXER, built=lambda layer: "", bound=False),
    Target(_MAMBA + "ops.ssu_dispatch", ("ssm_state_update",), ssm_update, method="selective_state_update",
           init_cls=_MIXER, built=lambda layer: "", bound=False),
)


# ----------------------------------------------------------------------------------- the engine state consulted
def _track_why() -> str:
    from sglang.srt.model_executor.forward_context import get_attn_backend, has_forward_context

    if not has_forward_context():
        return "no forward context (a mamba radix-cache tracking step cannot be told apart)"
    backend = get_attn_backend()
    md = getattr(getattr(backend, "linear_attn_backend", backend), "forward_metadata", None)
    if md is None:
        return "no linear-attention metadata (a mamba radix-cache tracking step cannot be told apart)"
    return "mamba radix-cache tracking step (the engine keeps chunk states)" if md.has_mamba_track_mask else ""


def _server_args():
    from sglang.srt.server_args import get_global_server_args

    try:
        return get_global_server_args()
    except ValueError:  # not published yet (plugin load): per-call checks still apply
        return None


def _gdn_backend_why(phase: str) -> str:
    sa = _server_args()
    if sa is None:
        return ""
    name = getattr(sa, f"linear_attn_{phase}_backend", None) or sa.linear_attn_backend
    if name == "triton" or (phase == "prefill" and name == "cutedsl" and _below_sm100()):
        return ""  # CuTe DSL prefill falls back to Triton below SM100 (GDNKernelDispatcher)
    return f"GDN {phase} backend {name} (fk hooks the Triton kernel)"


def _below_sm100() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] < 10


def _ssm_rounding_why() -> str:
    on = getattr(_server_args(), "enable_mamba_cache_stochastic_rounding", False)
    return "stochastic rounding of the SSM cache" if on else ""


def point_runtime() -> None:
    """Point the Runtime readers these adapters consult at SGLang's state (run at install, inside SGLang)."""
    Runtime.mamba_track_why = staticmethod(_track_why)
    Runtime.gdn_backend_why = staticmethod(_gdn_backend_why)
    Runtime.ssm_rounding_why = staticmethod(_ssm_rounding_why)
