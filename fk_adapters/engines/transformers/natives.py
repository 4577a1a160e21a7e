"""transformers' own math for each slot it hosts, in the slot's interface (what a passthrough plugin routes to).

Op for op what the HF modules compute (``LlamaRMSNorm.forward``, ``act_fn(gate_proj(x)) * up_proj(x)``,
``nn.Linear.forward``; for ``fused_moe`` the experts module's own forward, ``experts.native``), so a passthrough run
gives the stock model's outputs bit for bit. The gate and up halves are made contiguous first,
as HF's separate projections are: elementwise kernels then see the very same layout.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fk_adapters.engines.transformers.experts import native as fused_moe


def rms_norm(x, weight, eps):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _halves(x):
    d = x.shape[-1] // 2
    return x[..., :d].contiguous(), x[..., d:].contiguous()


def silu_and_mul(x):
    gate, up = _halves(x)
    return F.silu(gate) * up


def gelu_and_mul(x, approximate):
    gate, up = _halves(x)
    return F.gelu(gate, approximate=approximate) * up


def gemm(x, weight, bias):
    return F.linear(x, weight, bias)


def gated_rms_norm(x, z, weight, eps, group_size):
    """``MambaRMSNormGated.forward(x, gate)`` op for op, per group of ``group_size`` channels (Mamba2's: one group)."""
    h = x.to(torch.float32) * F.silu(z.to(torch.float32))
    groups = h.view(*h.shape[:-1], h.shape[-1] // group_size, group_size)
    h = (groups * torch.rsqrt(groups.pow(2).mean(-1, keepdim=True) + eps)).view(h.shape)
    return weight * h.to(x.dtype)


NATIVES = {"rms_norm": rms_norm, "silu_and_mul": silu_and_mul, "gelu_and_mul": gelu_and_mul, "gemm": gemm,
           "fused_moe": fused_moe, "gated_rms_norm": gated_rms_norm}


# The linear-attention / SSM slots: transformers' own scan functions (as the model's module had them before fk swapped
# any), called on the slot's sequences batched by length; each pool state gathered, and written back after.
_GDN_MODULE = "transformers.models.qwen3_next.modeling_qwen3_next"
_SSD_MODULE = "transformers.models.mamba2.modeling_mamba2"
SSD_CHUNK = 256  # Mamba2's default chunk_size (the slot has none; any chunk size gives the same scan)


def _own(module: str, function: str):
    import importlib

    from fk_adapters.engines.transformers import recurrent

    return recurrent.original(importlib.import_module(module), function)


def _batches(state_indices, cu_seqlens):
    """(sequence numbers, their pool slots, token starts, length) per group of live sequences of one length."""
    cu = cu_seqlens.tolist()
    groups: dict[int, list[tuple[int, int]]] = {}
    for n, s in enumerate(state_indices.tolist()):
        if s >= 0:
            groups.setdefault(cu[n + 1] - cu[n], []).append((n, s))
    for length, seqs in groups.items():
        yield [n for n, _ in seqs], [s for _, s in seqs], [cu[n] for n, _ in seqs], length


def _gather(x, starts, length):
    return torch.stack([x[s:s + length] for s in starts])


def _scatter(out, y, starts, length):
    for row, s in zip(y, starts):
        out[s:s + length] = row


def _gdn(function, q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, scale, use_qk_l2norm,
         out):
    if g.dim() != 2 or abs(scale - q.shape[-1] ** -0.5) > 1e-6 * scale:
        raise ValueError("transformers' gated delta rule takes a per-head decay and scales queries by K^-0.5 only")
    r = v.shape[1] // q.shape[1]
    for seqs, slots, starts, length in _batches(state_indices, cu_seqlens):
        qb, kb = (_gather(x, starts, length).repeat_interleave(r, dim=2) for x in (q, k))
        init = state[slots].transpose(-1, -2).float()
        if has_initial_state is not None:
            init = init * has_initial_state[seqs].to(init)[:, None, None, None]
        o, final = function(qb, kb, _gather(v, starts, length), g=_gather(g, starts, length),
                            beta=_gather(beta, starts, length), initial_state=init, output_final_state=True,
                            use_qk_l2norm_in_kernel=use_qk_l2norm)
        _scatter(out, o.to(out.dtype), starts, length)
        state[slots] = final.transpose(-1, -2).to(state.dtype)


def gated_delta_rule(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, scale, use_qk_l2norm,
                     out):
    _gdn(_own(_GDN_MODULE, "torch_chunk_gated_delta_rule"), q, k, v, g, beta, state, state_indices, cu_seqlens,
         has_initial_state, scale, use_qk_l2norm, out)


def gated_delta_rule_decode(q, k, v, g, beta, state, state_indices, scale, use_qk_l2norm, out):
    cu = torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device)
    _gdn(_own(_GDN_MODULE, "torch_recurrent_gated_delta_rule"), q, k, v, g, beta, state, state_indices, cu, None,
         scale, use_qk_l2norm, out)


def ssd_chunk_scan(x, dt, A, B, C, D, dt_bias, state, state_indices, cu_seqlens, has_initial_state, out):
    scan = _own(_SSD_MODULE, "mamba2_chunk_scan")
    for seqs, slots, starts, length in _batches(state_indices, cu_seqlens):
        init = state[slots].float()
        if has_initial_state is not None:
            init = init * has_initial_state[seqs].to(init)[:, None, None, None]
        y, final = scan(_gather(x, starts, length), _gather(dt, starts, length), A, _gather(B, starts, length),
                        _gather(C, starts, length), SSD_CHUNK, D=D, dt_bias=dt_bias, initial_states=init,
                        dt_softplus=True, return_final_states=True)
        _scatter(out, y.to(out.dtype), starts, length)
        state[slots] = final.to(state.dtype)


def ssm_state_update(x, dt, A, B, C, D, dt_bias, state, state_indices, out):
    update = _own(_SSD_MODULE, "mamba2_selective_state_update")
    live = (state_indices >= 0).nonzero().flatten()
    if not live.numel():
        return
    slots = state_indices[live].long()
    h, p, n = state.shape[1:]
    st = state[slots]
    y = update(st, x[live], dt[live][:, :, None].expand(-1, -1, p), A[:, None, None].expand(-1, p, n), B[live],
               C[live], None if D is None else D[:, None].expand(-1, p), dt_bias=dt_bias[:, None].expand(-1, p),
               dt_softplus=True)
    out[live] = y.to(out.dtype)
    state[slots] = st


NATIVES |= {"gated_delta_rule": gated_delta_rule, "gated_delta_rule_decode": gated_delta_rule_decode,
            "ssd_chunk_scan": ssd_chunk_scan, "ssm_state_update": ssm_state_update}


# The non-LLM slots: nn.LayerNorm.forward, nn.Conv2d's zero-padded F.conv2d, transformers' sdpa_attention_forward.
def layer_norm(x, weight, bias, eps):
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def conv2d(x, weight, bias, stride, padding, dilation, groups):
    return F.conv2d(x, weight, bias, stride, padding, dilation, groups)


def sdpa(q, k, v, attn_mask, is_causal, scale):
    """F.scaled_dot_product_attention as transformers calls it: GQA through enable_gqa where it uses that, else
    the kv heads repeated (its repeat_kv)."""
    from transformers.integrations.sdpa_attention import repeat_kv, use_gqa_in_sdpa

    kwargs = {}
    group = q.shape[1] // k.shape[1]
    if group > 1 and use_gqa_in_sdpa(attn_mask, k, v):
        kwargs["enable_gqa"] = True
    elif group > 1:
        k, v = repeat_kv(k, group), repeat_kv(v, group)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=0.0, scale=scale,
                                          is_causal=is_causal, **kwargs)


NATIVES |= {"layer_norm": layer_norm, "conv2d": conv2d, "sdpa": sdpa}
