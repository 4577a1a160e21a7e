"""The routed experts of an unquantized mixture-of-experts layer, after routing."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fk_adapters.tasks.slot import Slot, acc, nbytes

ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "swigluoai")

# Mixtral-like (E=8, k=2) small; GPT-OSS-like (E=32, k=4, biases, swigluoai, padded -1 rows); Mixtral-like decode;
# OLMoE/Qwen3-like (E=64, k=8, padded rows); DeepSeek-like (E=128, k=8, routed scaling, router weights in
# x.dtype); Llama4-like (k=1, router weight on the input). Hidden sizes are cut down so the weights stay small on a CPU.
MOE_CASES = (
    {"tokens": 7, "hidden": 128, "inter": 256, "experts": 8, "topk": 2, "activation": "silu"},
    {"tokens": 19, "hidden": 192, "inter": 96, "experts": 32, "topk": 4, "activation": "swigluoai", "bias": True,
     "padded": 2},
    {"tokens": 1, "hidden": 1024, "inter": 512, "experts": 8, "topk": 2, "activation": "silu", "ids": "int64"},
    {"tokens": 64, "hidden": 384, "inter": 192, "experts": 64, "topk": 8, "activation": "silu", "padded": 3},
    {"tokens": 33, "hidden": 256, "inter": 128, "experts": 128, "topk": 8, "activation": "gelu", "scaling": 2.5,
     "weights": "x"},
    {"tokens": 9, "hidden": 128, "inter": 64, "experts": 16, "topk": 1, "activation": "gelu_tanh", "on_input": True},
)


def _act(g: torch.Tensor, activation: str, alpha: float, limit: float) -> torch.Tensor:
    """[.., 2I] -> [.., I]: gate halves for silu/gelu/gelu_tanh, interleaved gate/up rows for swigluoai."""
    if activation == "swigluoai":
        gate, up = g[..., 0::2].clamp(max=limit), g[..., 1::2].clamp(-limit, limit)
        return (up + 1) * gate * torch.sigmoid(alpha * gate)
    gate, up = g.chunk(2, dim=-1)
    if activation == "silu":
        return F.silu(gate) * up
    if activation in ("gelu", "gelu_tanh"):
        return F.gelu(gate, approximate="tanh" if activation == "gelu_tanh" else "none") * up
    raise ValueError(f"activation must be one of {ACTIVATIONS}, not {activation!r}")


def fused_moe(x, w13, w2, topk_weights, topk_ids, activation: str, apply_router_weight_on_input: bool,
              w13_bias, w2_bias, alpha: float, limit: float, routed_scaling_factor: float) -> torch.Tensor:
    """out[t] = routed_scaling_factor * sum_j w_tj * (w2[e] @ act(w13[e] @ x[t] + b13[e]) + b2[e]), e = topk_ids[t, j].

    With apply_router_weight_on_input, w_tj scales x[t] instead of the expert's output. ids outside [0, E)
    contribute nothing. Float32 math (float64 for float64), cast to x.dtype.
    """
    _act(x.new_zeros(0, 2), activation, alpha, limit)  # an unknown activation fails even when no token is routed
    xf = acc(x)
    out = torch.zeros_like(xf)
    weights, ids = topk_weights.to(xf.dtype), topk_ids.long()
    for e in _hit(ids, w13.shape[0]).tolist():
        tok, j = (ids == e).nonzero(as_tuple=True)
        w = weights[tok, j, None]
        h = xf[tok] * w if apply_router_weight_on_input else xf[tok]
        g = h @ acc(w13[e]).T + (0 if w13_bias is None else acc(w13_bias[e]))
        o = _act(g, activation, alpha, limit) @ acc(w2[e]).T + (0 if w2_bias is None else acc(w2_bias[e]))
        out.index_add_(0, tok, o if apply_router_weight_on_input else o * w)
    return (out * routed_scaling_factor).to(x.dtype)


def _moe_inputs(case, dtype, device, gen):
    t, h, i, e, k = case["tokens"], case["hidden"], case["inter"], case["experts"], case["topk"]
    x = torch.randn(t, h, generator=gen)
    w13 = torch.randn(e, 2 * i, h, generator=gen) / h ** 0.5
    w2 = torch.randn(e, h, i, generator=gen) / i ** 0.5
    probs = torch.softmax(torch.randn(t, e, generator=gen), dim=-1)  # a router: softmax, top-k, renormalised
    weights, ids = probs.topk(k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    ids = ids.to(getattr(torch, case.get("ids", "int32")))
    if case.get("padded"):  # CUDA-graph padding rows: routed nowhere
        ids[-case["padded"]:] = -1
    bias = case.get("bias", False)
    b13 = 0.1 * torch.randn(e, 2 * i, generator=gen) if bias else None  # float32 whatever x's dtype, as vLLM
    b2 = 0.1 * torch.randn(e, h, generator=gen) if bias else None
    x, w13, w2 = (v.to(device=device, dtype=dtype) for v in (x, w13, w2))
    weights = weights.to(device=device, dtype=dtype if case.get("weights") == "x" else torch.float32)
    b13, b2 = (None if v is None else v.to(device) for v in (b13, b2))
    return (x, w13, w2, weights, ids.to(device), case["activation"], case.get("on_input", False), b13, b2,
            1.702, 7.0, case.get("scaling", 1.0))


def _moe_traffic(x, w13, w2, topk_weights, topk_ids, activation, on_input, w13_bias, w2_bias, alpha, limit,
                 scaling) -> int:
    """x read and out written, the routing read, the weights (and biases) of the distinct experts hit read once."""
    e = w13.shape[0]
    per_expert = sum(nbytes(t) // e for t in (w13, w2, w13_bias, w2_bias) if t is not None)
    return 2 * nbytes(x) + nbytes(topk_weights) + nbytes(topk_ids) + _hit(topk_ids, e).numel() * per_expert


def _hit(ids: torch.Tensor, experts: int) -> torch.Tensor:
    """The distinct experts ``ids`` routes to; ids outside [0, experts) route nowhere."""
    return ids[(ids >= 0) & (ids < experts)].unique()


def _moe_flops(x, w13, w2, topk_weights, *rest) -> int:
    t, h = x.shape
    k, i = topk_weights.shape[1], w2.shape[2]
    return 2 * t * k * (2 * i * h + h * i)


FUSED_MOE = Slot(
    name="fused_moe",
    summary="the routed experts of an unquantized MoE layer after routing: sum_j w_j * w2[e_j] @ act(w13[e_j] @ x)",
    signature=("fused_moe(x: Tensor[T, H], w13: Tensor[E, 2I, H], w2: Tensor[E, H, I], topk_weights: Tensor[T, k], "
               "topk_ids: Tensor[T, k] int32|int64, activation: str, apply_router_weight_on_input: bool, "
               "w13_bias: Tensor[E, 2I] | None, w2_bias: Tensor[E, H] | None, alpha: float, limit: float, "
               "routed_scaling_factor: float) -> Tensor[T, H]"),
    schema=("(Tensor x, Tensor w13, Tensor w2, Tensor topk_weights, Tensor topk_ids, str activation, "
            "bool apply_router_weight_on_input, Tensor? w13_bias, Tensor? w2_bias, float alpha, float limit, "
            "float routed_scaling_factor) -> Tensor"),
    fake=lambda x, *rest: x.new_empty(x.shape),
    reference=fused_moe,
    make_inputs=_moe_inputs,
    cases=MOE_CASES,
    traffic=_moe_traffic,
    flops=_moe_flops,
    growth=2,  # act(gate) * up: quadratic in x; fk check draws w13 and w2 at a trained layer's scale
    entries={
        "vllm": ("CustomOp 'unquantized_fused_moe' (UnquantizedFusedMoEMethod, vllm.model_executor.layers.fused_moe) "
                 "through CustomOp.register_oot, its forward after routing (non-monolithic paths; monolithic ones "
                 "stay stock); quantized MoE layers counted left stock at RoutedExperts.__init__",),
        "sglang": ("UnquantizedFusedMoEMethod.forward_cuda (sglang.srt.layers.quantization.unquant), AROUND hook, "
                   "on the Triton runner backend with standard top-k output (triton_kernels, FlashInfer, DeepGEMM, "
                   "aiter backends and expert parallel stay stock); routed_scaling_factor passed to the slot",),
        "transformers": ("forward of each experts module decorated with @use_experts_implementation (MixtralExperts, "
                         "Qwen3MoeExperts, Qwen3NextExperts, DeepseekV3Experts, GptOssExperts), per instance, "
                         "when the slot agrees with the module's own forward on a seeded input",),
    },
)
