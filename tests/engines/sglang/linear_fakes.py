"""SGLang 0.5.15's linear-attention / SSM calls rebuilt from a slot case (no SGLang here): each builder returns the
hooked call as SGLang makes it, how to read SGLang's result back (output rows, state pool after the engine's own
follow-up), and the slot arguments whose reference gives the engine call's semantics."""
from __future__ import annotations

from types import SimpleNamespace as NS

import torch

INF = float("inf")


def kernel_gates(A_log, a, b, dt_bias, round_beta: bool):
    """SGLang's GDN gates as its Triton kernels compute them (fused_recurrent.py:247-254, fused_gdn_gating.py:34-41):
    softplus linear above 20, beta stored in b's dtype where ``round_beta``."""
    x = a.float() + dt_bias.float()
    g = -A_log.float().exp() * torch.where(x <= 20, torch.log1p(torch.exp(x)), x)
    beta = 1 / (1 + torch.exp(-b.float()))
    return g, beta.to(b.dtype).float() if round_beta else beta


def fresh_zeroed(pool, idx, has_init):
    """SGLang has no has_initial_state: a request's slot is zeroed when it is handed out (MambaPool.clear_slots)."""
    if has_init is not None:
        fresh = idx[(idx >= 0) & ~has_init].long()
        pool[fresh] = 0
    return pool


def gdn_extend(args):
    """TritonGDNKernel.extend(q, k, v, g, beta, *, ssm_states, cache_indices, query_start_loc) for a prefill case."""
    q, k, v, g, beta, state, idx, cu, has_init, scale, l2, out = args
    pool = fresh_zeroed(state.clone(), idx, has_init)
    kw = dict(ssm_states=pool, cache_indices=idx, query_start_loc=cu)
    return NS(args=(q[None], k[None], v[None], g[None], beta[None]), kwargs=kw,
              read=lambda res: (res[0][0], pool), ref_args=args, live=_live_rows(idx, cu))


def _raw_gates(hv, r, gen, dtype):
    a = torch.randn(r, hv, generator=gen).to(dtype)
    b = torch.randn(r, hv, generator=gen).to(dtype)
    return a, b, torch.randn(hv, generator=gen) * 0.5, torch.randn(hv, generator=gen)


def gdn_packed_decode(args, gen, dtype=torch.float32):
    """TritonGDNKernel.packed_decode(mixed_qkv, a, b, *, A_log, dt_bias, scale, ssm_states, cache_indices,
    num_v_heads, head_v_dim, replayssm_*=None) for a decode case, its raw gates drawn here (a, b in ``dtype``)."""
    q, k, v, _, _, state, idx, scale, l2, out = args
    r, hv, vd = v.shape
    mixed = torch.cat([q.flatten(1), k.flatten(1), v.flatten(1)], dim=-1).to(dtype)
    a, b, A_log, dt_bias = _raw_gates(hv, r, gen, dtype)
    pool = state.clone()
    kw = dict(A_log=A_log, dt_bias=dt_bias, scale=scale, ssm_states=pool, cache_indices=idx, num_v_heads=hv,
              head_v_dim=vd, replayssm_d=None, replayssm_k=None, replayssm_g=None, replayssm_write_pos=None,
              replayssm_force_flush=None)
    g, beta = kernel_gates(A_log, a, b, dt_bias, round_beta=True)
    # the kernel reads q, k, v at offsets i_h K, H K + i_h K, 2 H K + i_hv V of a row: the case's own q, k, v
    ref = (q.to(dtype), k.to(dtype), v.to(dtype), g, beta, state, idx, scale, l2, out)
    return NS(args=(mixed, a, b), kwargs=kw, read=lambda res: (res[0], pool), ref_args=ref, live=idx >= 0)


def gdn_decode(args, gen):
    """TritonGDNKernel.decode(q, k, v [1, R, ...], a, b, *, A_log, dt_bias, ssm_states, cache_indices,
    query_start_loc) for a decode case (the fused sigmoid-gating kernel: beta not rounded)."""
    q, k, v, _, _, state, idx, scale, l2, out = args
    r, hv, _ = v.shape
    a, b, A_log, dt_bias = _raw_gates(hv, r, gen, torch.float32)
    pool = state.clone()
    kw = dict(A_log=A_log, dt_bias=dt_bias, ssm_states=pool, cache_indices=idx,
              query_start_loc=torch.arange(r + 1, dtype=torch.int32))
    g, beta = kernel_gates(A_log, a, b, dt_bias, round_beta=False)
    return NS(args=(q[None], k[None], v[None], a, b), kwargs=kw, read=lambda res: (res[0], pool),
              ref_args=(q, k, v, g, beta, state, idx, scale, l2, out), live=idx >= 0)


def ssd_scan(args, chunk_size: int = 256):
    """mamba_chunk_scan_combined(...) as MambaMixer2.forward makes it (mamba.py:590-636): initial states gathered
    (zeros where a sequence has none; None when no sequence has one), then the engine scatters the varlen states."""
    x, dt, A, B, C, D, dt_bias, state, idx, cu, has_init, out = args
    t, h, p = x.shape
    pool, buf = state.clone(), out.clone()
    init = (torch.where(has_init[:, None, None, None], pool[idx.long()], 0) if bool(has_init.any()) else None)
    kw = dict(chunk_size=chunk_size, D=D, z=None, dt_bias=dt_bias, seq_idx=None, chunk_indices=None,
              chunk_offsets=None, cu_seqlens=cu, initial_states=init, return_varlen_states=True,
              return_final_states=False, return_intermediate_states=True, dt_softplus=True, dt_limit=(0.0, INF),
              out=buf.view(1, t, h, p), state_dtype=pool.dtype)

    def read(res):
        _, varlen = res
        pool[idx.long()] = varlen.to(pool.dtype)  # the engine's scatter (mamba.py:636)
        return buf, pool

    return NS(args=(x[None], dt[None], A, B[None], C[None]), kwargs=kw, read=read, ref_args=args,
              live=_live_rows(idx, cu))


def ssm_update(args):
    """selective_state_update(...) as MambaMixer2.forward's decode makes it (mamba.py:693-756): dt, A, D and dt_bias
    expanded over the head dim (and A over the state size), in place on the pool."""
    x, dt, A, B, C, D, dt_bias, state, idx, out = args
    h, p, n = state.shape[1:]
    pool, buf = state.clone(), out.clone()
    call = (pool, x, dt[:, :, None].expand(-1, -1, p), A[:, None, None].expand(-1, p, n).to(torch.float32), B, C,
            None if D is None else D[:, None].expand(-1, p))
    kw = dict(z=None, dt_bias=dt_bias[:, None].expand(-1, p), dt_softplus=True, state_batch_indices=idx, out=buf)
    return NS(args=call, kwargs=kw, read=lambda res: (buf, pool), ref_args=args, live=idx >= 0)


def _live_rows(idx, cu):
    lens = (cu[1:] - cu[:-1]).long()
    return torch.repeat_interleave(idx >= 0, lens)


def kda_layer():
    return NS(A_log=torch.zeros(1, 1, 4, 1), dt_bias=torch.zeros(64), num_v_heads=4)


def gdn_layer():
    return NS(A_log=torch.zeros(4), dt_bias=torch.zeros(4), num_v_heads=4)


def full_call(target, c) -> tuple:
    """(the call's first argument, the rest): ``c``'s call with every argument the adapter knows given by position
    (the kernel object first for a method)."""
    import inspect

    params = inspect.signature(target.adapter).parameters
    names = target.params.names
    values = list(c.args) + [c.kwargs.get(n, params[n].default) for n in names[len(c.args):]]
    return (object(), tuple(values)) if target.bound else (values[0], tuple(values[1:]))


def simple_call(slot: str) -> tuple:
    """(first argument, the rest) of one plain call of ``slot``'s first target, every argument by position."""
    from fk_adapters.engines.sglang import linear_attention
    from fk_adapters.tasks import SLOTS

    s = SLOTS[slot]
    case = next(c for c in s.cases if "skip" not in c and not c.get("per_key_decay"))
    args = s.make_inputs(case, torch.float32, "cpu", torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(0)
    build = {"gated_delta_rule": gdn_extend, "gated_delta_rule_decode": lambda a: gdn_packed_decode(a, gen),
             "ssd_chunk_scan": ssd_scan, "ssm_state_update": ssm_update}[slot]
    target = next(t for t in linear_attention.TARGETS if slot in t.slots)
    return full_call(target, build(args))
