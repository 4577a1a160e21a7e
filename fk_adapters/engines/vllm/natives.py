"""vLLM's own kernels for each slot, in the slot's interface (what a passthrough plugin routes to)."""
from __future__ import annotations

import torch
from torch.utils.weak import WeakIdKeyDictionary


def rms_norm(x, weight, eps):
    if x.device.type == "cpu":  # the CPU kernel ignores row strides (q/k norms take slices of a fused qkv)
        x = x.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    torch.ops._C.rms_norm(out, x, weight, eps)
    return out


def fused_add_rms_norm(x, residual, weight, eps):
    torch.ops._C.fused_add_rms_norm(x, residual, weight, eps)


def silu_and_mul(x):
    out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)
    torch.ops._C.silu_and_mul(out, x)
    return out


def gelu_and_mul(x, approximate):
    out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)
    op = torch.ops._C.gelu_tanh_and_mul if approximate == "tanh" else torch.ops._C.gelu_and_mul
    op(out, x)
    return out


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
    torch.ops._C.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)


# --------------------------------------------------------------------------- gemm and fused_moe
# vLLM's CPU paths keep per-layer state built at load (a packed GEMM handle, prepacked expert weights): the fk
# layers hand it over here, keyed by the weight tensor the op receives; a weight nobody registered (fk check's
# inputs) gets the same state built on first use, kept while that tensor lives and is not written to.
_cpu_state = WeakIdKeyDictionary()  # by identity: tensors' == is elementwise


def remember(weights: tuple, state) -> None:
    """Register the engine's CPU state (a GEMM handle, or packed expert weights) built for ``weights``."""
    _cpu_state[weights[0]] = (_stamp(weights), state)


def _stamp(weights: tuple) -> tuple:
    return tuple((id(w), w._version) for w in weights)


def _state_for(weights: tuple, build):
    hit = _cpu_state.get(weights[0])
    if hit is None or hit[0] != _stamp(weights):
        remember(weights, build())
        hit = _cpu_state[weights[0]]
    return hit[1]


def _cpu_linear_for(weight):
    """The handle vLLM's CPU loader builds for a linear layer with this weight (oneDNN, sgl or zentorch)."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    holder = torch.nn.Module()
    holder.weight = torch.nn.Parameter(weight, requires_grad=False)
    dispatch_cpu_unquantized_gemm(holder, remove_weight=False)
    return holder.cpu_linear


def gemm(x, weight, bias):
    if x.device.type == "cpu":
        return _state_for((weight,), lambda: _cpu_linear_for(weight))(x, weight, bias)
    from vllm.model_executor.layers.utils import default_unquantized_gemm

    return default_unquantized_gemm(None, x, weight, bias)


def _padded(w13, w2, pad: int):
    """w13 [E, 2I, H] / w2 [E, H, I] with I zero-padded by ``pad`` (gate and up halves each), as vLLM's CPU experts."""
    i = w13.shape[1] // 2
    z13 = w13.new_zeros(w13.shape[:1] + (pad,) + w13.shape[2:])
    return (torch.cat([w13[:, :i], z13, w13[:, i:], z13], 1),
            torch.cat([w2, w2.new_zeros(w2.shape[:2] + (pad,))], 2))


def _cpu_moe_pack(w13, w2, activation):
    """(w13, w2, isa, pad) as vLLM's generic CPU experts (isa "vec") hold them: intermediate padded, prepacked."""
    from vllm import _custom_ops as ops
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts as cls

    pad = 0 if activation.startswith("swigluoai") else -(w13.shape[1] // 2) % cls._intermediate_alignment()
    w13, w2 = w13.contiguous(), w2.contiguous()  # the transformers host hands GPT-OSS's experts over transposed
    if pad:
        w13, w2 = _padded(w13, w2, pad)
    return ops.cpu_prepack_moe_weight(w13, cls.isa), ops.cpu_prepack_moe_weight(w2, cls.isa), cls.isa, pad


def _padded_bias(b13, pad: int):
    if b13 is None or not pad:
        return b13
    i = b13.shape[1] // 2
    z = b13.new_zeros(b13.shape[0], pad)
    return torch.cat([b13[:, :i], z, b13[:, i:], z], 1)


def fused_moe(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, w13_bias, w2_bias,
              alpha, limit, routed_scaling_factor):
    # ids outside [0, E) (padded rows) route nowhere: vLLM's kernels would read out of bounds; on device, no sync
    valid = (topk_ids >= 0) & (topk_ids < w13.shape[0])
    topk_ids = torch.where(valid, topk_ids, 0)
    topk_weights = torch.where(valid, topk_weights, 0)
    out = _fused_moe(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, w13_bias,
                     w2_bias, alpha, limit)
    if apply_router_weight_on_input:  # k == 1: a row routed nowhere gets 0, not its expert's response to 0
        out = torch.where(valid.any(-1, keepdim=True), out, 0)
    return out if routed_scaling_factor == 1.0 else out * routed_scaling_factor


def _fused_moe(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, w13_bias, w2_bias,
               alpha, limit):
    if apply_router_weight_on_input:  # vLLM's prepare step scales the input (k == 1), the kernel then skips it
        x = (x * topk_weights.to(x.dtype)).contiguous()
    if x.device.type == "cpu":
        from vllm import _custom_ops as ops

        p13, p2, isa, pad = _state_for((w13, w2), lambda: _cpu_moe_pack(w13, w2, activation))
        out = torch.empty_like(x)
        topk_ids = topk_ids.to(torch.int32)  # the kernel's ids (the slot's may be int64, as HF's router gives)
        if apply_router_weight_on_input:  # the kernel then writes to topk_weights: the slot's inputs stay as given
            topk_weights = topk_weights.clone()
        ops.cpu_fused_moe(out, x, p13, p2, _padded_bias(w13_bias, pad), w2_bias, topk_weights, topk_ids, activation,
                          isa, apply_router_weight_on_input)
    else:
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation
        from vllm.model_executor.layers.fused_moe.config import biased_moe_quant_config
        from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts

        config = None
        if w13_bias is not None or w2_bias is not None or activation.startswith("swigluoai"):
            config = biased_moe_quant_config(w13_bias, w2_bias, gemm1_alpha=alpha, gemm1_clamp_limit=limit)
        out = fused_experts(x, w13, w2, topk_weights, topk_ids, activation=MoEActivation(activation),
                            apply_router_weight_on_input=apply_router_weight_on_input, quant_config=config)
    return out

NATIVES = {f.__name__: f for f in (rms_norm, fused_add_rms_norm, silu_and_mul, gelu_and_mul, rotary_embedding,
                                         gemm, fused_moe)}
