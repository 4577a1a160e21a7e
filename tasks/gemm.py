"""Dense matrix multiplication: the unquantized linear layer, y = x @ weight.T (+ bias)."""
from __future__ import annotations

import torch

from fk_adapters.tasks.slot import Slot, acc, nbytes

# Small shapes, a Qwen2-0.5B-like QKV with bias, a decode row through a 4096x4096 projection, a prefill block.
GEMM_CASES = ({"tokens": 7, "k": 128, "n": 384, "bias": True},
              {"tokens": 33, "k": 896, "n": 1152, "bias": True},
              {"tokens": 1, "k": 4096, "n": 4096, "bias": False},
              {"tokens": 64, "k": 2048, "n": 1024, "bias": False})


def gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """out[t, n] = sum_k x[t, k] * weight[n, k] (+ bias[n]), accumulated in float32 (float64 for float64),
    cast to x.dtype."""
    y = acc(x) @ acc(weight).T
    if bias is not None:
        y = y + acc(bias)
    return y.to(x.dtype)


def _gemm_inputs(case, dtype, device, gen):
    t, k, n = case["tokens"], case["k"], case["n"]
    x = torch.randn(t, k, generator=gen)
    w = torch.randn(n, k, generator=gen) / k ** 0.5  # a trained layer's scale: output rms near the input's
    b = 0.1 * torch.randn(n, generator=gen) if case["bias"] else None
    return tuple(None if v is None else v.to(device=device, dtype=dtype) for v in (x, w, b))


def _gemm_traffic(x, weight, bias) -> int:
    out = x.shape[0] * weight.shape[0] * x.element_size()
    return nbytes(x) + nbytes(weight) + nbytes(bias) + out


GEMM = Slot(
    name="gemm",
    summary="dense matrix multiplication of an unquantized linear layer: x @ weight.T (+ bias)",
    signature="gemm(x: Tensor[T, K], weight: Tensor[N, K], bias: Tensor[N] | None) -> Tensor[T, N]",
    schema="(Tensor x, Tensor weight, Tensor? bias) -> Tensor",
    fake=lambda x, weight, bias: x.new_empty((x.shape[0], weight.shape[0])),
    reference=gemm,
    make_inputs=_gemm_inputs,
    cases=GEMM_CASES,
    traffic=_gemm_traffic,
    flops=lambda x, weight, bias: 2 * x.shape[0] * weight.shape[0] * x.shape[1],
    growth=1,  # linear in x; fk check draws the weight at a trained layer's scale (rows of norm near 1)
    entries={
        "vllm": ("the unquantized linear layers (ReplicatedLinear, ColumnParallelLinear, MergedColumnParallelLinear, "
                 "QKVParallelLinear, RowParallelLinear; vllm.model_executor.layers.linear) through "
                 "PluggableLayer.register_oot, where quant_method is exactly UnquantizedLinearMethod "
                 "(a quantized layer stays stock), and the lm_head (ParallelLMHead, its UnquantizedEmbeddingMethod."
                 "apply, padded vocab); leading dims of x flattened to T",),
        "sglang": ("UnquantizedLinearMethod.apply (sglang.srt.layers.quantization.unquant), AROUND hook: every "
                   "LinearBase layer built with the unquantized method (quantized layers stay stock)",
                   "LogitsProcessor._compute_lm_head (sglang.srt.layers.logits_processor), AROUND hook: the lm_head's "
                   "plain matmul (LoRA, fp32 and quantized heads stay stock)"),
        "transformers": ("forward(x) of each module whose type is exactly torch.nn.Linear, per instance; "
                         "leading dims of x flattened to T",),
    },
)
