"""RMS normalization slots."""
from __future__ import annotations

import torch

from fk_adapters.tasks.slot import Slot, acc, nbytes as _nbytes

NORM_CASES = ({"tokens": 1, "hidden": 128}, {"tokens": 7, "hidden": 256}, {"tokens": 33, "hidden": 4096})


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """out = x / sqrt(mean(x^2, -1) + eps) * weight, computed in float32 (float64 for float64 inputs),
    cast back to x.dtype."""
    xf = acc(x)
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (y.to(x.dtype) * weight).to(x.dtype)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """In place: residual <- x + residual; x <- rms_norm(residual) * weight."""
    s = acc(x) + acc(residual)
    residual.copy_(s.to(residual.dtype))
    x.copy_(rms_norm(residual, weight, eps))


def _norm_inputs(case, dtype, device, gen, with_residual: bool):
    shape = (case["tokens"], case["hidden"])
    x = torch.randn(shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
    w = (1.0 + 0.1 * torch.randn(case["hidden"], generator=gen)).to(device=device, dtype=dtype)
    if not with_residual:
        return (x, w, 1e-6)
    r = torch.randn(shape, generator=gen, dtype=torch.float32).to(device=device, dtype=dtype)
    return (x, r, w, 1e-6)


RMS_NORM = Slot(
    name="rms_norm",
    summary="RMS normalization with a learned weight",
    signature="rms_norm(x: Tensor[..., H], weight: Tensor[H], eps: float) -> Tensor[..., H]",
    schema="(Tensor x, Tensor weight, float eps) -> Tensor",
    fake=lambda x, weight, eps: x.new_empty(x.shape),
    reference=rms_norm,
    make_inputs=lambda case, dtype, device, gen: _norm_inputs(case, dtype, device, gen, False),
    cases=NORM_CASES,
    traffic=lambda x, weight, eps: 2 * _nbytes(x) + _nbytes(weight),
    entries={
        "vllm": ("CustomOp 'RMSNorm' (vllm.model_executor.layers.layernorm), forward(x) without residual",),
        "sglang": ("RMSNorm.forward_cuda (sglang.srt.layers.layernorm), residual is None",),
        "transformers": ("forward(x) of each module whose class name ends in 'RMSNorm' (1-D weight, eps), "
                         "per instance, "
                         "when its own forward agrees with the slot (e.g. LlamaRMSNorm, BitNetRMSNorm; not 1 + w)",),
    },
)

FUSED_ADD_RMS_NORM = Slot(
    name="fused_add_rms_norm",
    summary="residual add followed by RMS normalization, both in place",
    signature="fused_add_rms_norm(x: Tensor[T, H], residual: Tensor[T, H], weight: Tensor[H], eps: float) -> None",
    schema="(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()",
    reference=fused_add_rms_norm,
    make_inputs=lambda case, dtype, device, gen: _norm_inputs(case, dtype, device, gen, True),
    cases=NORM_CASES,
    mutates=("x", "residual"),
    traffic=lambda x, residual, weight, eps: 2 * _nbytes(x) + 2 * _nbytes(residual) + _nbytes(weight),
    entries={
        "vllm": ("CustomOp 'RMSNorm' (vllm.model_executor.layers.layernorm), forward(x, residual)",),
        "sglang": ("RMSNorm.forward_cuda (sglang.srt.layers.layernorm), residual given",),
    },
)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """out = (x - mean(x, -1)) / sqrt(var(x, -1) + eps) * weight + bias over the last dim (biased variance;
    weight and bias optional), all in float32 (float64 for float64 inputs), cast once to x.dtype."""
    xf = acc(x)
    centred = xf - xf.mean(dim=-1, keepdim=True)
    y = centred * torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        y = y * acc(weight)
    if bias is not None:
        y = y + acc(bias)
    return y.to(x.dtype)


# ViT widths (with and without an affine), rows far off zero (the mean must be taken out first), weight without bias
LAYER_NORM_CASES = ({"tokens": 7, "hidden": 128, "weight": True, "bias": True},
                    {"tokens": 33, "hidden": 768, "weight": True, "bias": True, "offset": 100.0},
                    {"tokens": 5, "hidden": 96, "weight": False, "bias": False},
                    {"tokens": 16, "hidden": 40, "weight": True, "bias": False})


def _layer_norm_inputs(case, dtype, device, gen):
    x = torch.randn(case["tokens"], case["hidden"], generator=gen) + case.get("offset", 0.0)
    w = 1.0 + 0.1 * torch.randn(case["hidden"], generator=gen) if case["weight"] else None
    b = 0.1 * torch.randn(case["hidden"], generator=gen) if case["bias"] else None
    return tuple(v if v is None else v.to(device=device, dtype=dtype) for v in (x, w, b)) + (1e-5,)


LAYER_NORM = Slot(
    name="layer_norm",
    summary="layer normalization over the last dim with an optional learned weight and bias",
    signature=("layer_norm(x: Tensor[T, D], weight: Tensor[D] | None, bias: Tensor[D] | None, eps: float) "
               "-> Tensor[T, D]"),
    schema="(Tensor x, Tensor? weight, Tensor? bias, float eps) -> Tensor",
    fake=lambda x, weight, bias, eps: x.new_empty(x.shape),
    reference=layer_norm,
    make_inputs=_layer_norm_inputs,
    cases=LAYER_NORM_CASES,
    traffic=lambda x, weight, bias, eps: 2 * _nbytes(x) + _nbytes(weight) + _nbytes(bias),
    entries={
        "transformers": ("forward(x) of each module whose type is exactly torch.nn.LayerNorm over one (last) dim, "
                         "per instance, when its own forward agrees with the slot (ViT, DINOv3, SigLIP, BERT, "
                         "ConvNeXt-V2, SwinV2); leading dims of x flattened",),
    },
    not_entered={
        "vllm": "its decoder LLMs normalize with RMSNorm; LayerNorm layers (encoders, vision towers) stay stock",
        "sglang": "its decoder LLMs normalize with RMSNorm; LayerNorm layers (encoders, vision towers) stay stock",
    },
)
