"""RMS normalization slots."""
from __future__ import annotations

import torch

from fk_adapters.tasks.slot import SGLANG_DIFFUSERS_FALLBACK, Slot, acc, nbytes as _nbytes

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
        "sglang": ("its decoder LLMs normalize with RMSNorm; LayerNorm layers (encoders, vision towers) stay stock; "
                   + SGLANG_DIFFUSERS_FALLBACK),
    },
)


def gated_rms_norm(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, eps: float, group_size: int) -> torch.Tensor:
    """Mamba2's gated norm, the gate before the norm: g = x * silu(z); each group of ``group_size`` channels of g
    divided by sqrt(mean(g^2) + eps); rounded to x.dtype, then times weight. float32 inside (float64 for float64)."""
    g = acc(x) * torch.nn.functional.silu(acc(z))
    groups = g.view(*g.shape[:-1], g.shape[-1] // group_size, group_size)
    y = (groups * torch.rsqrt(groups.pow(2).mean(dim=-1, keepdim=True) + eps)).view(g.shape)
    return (y.to(x.dtype) * weight).to(x.dtype)


# one group (Mamba2-2.7B) and several (Codestral-style n_groups=8), a decode row and a prefill's rows
GATED_NORM_CASES = ({"tokens": 1, "hidden": 128, "group": 128}, {"tokens": 7, "hidden": 256, "group": 64},
                    {"tokens": 33, "hidden": 4096, "group": 512})


def _gated_norm_inputs(case, dtype, device, gen):
    shape = (case["tokens"], case["hidden"])
    x, z = (torch.randn(shape, generator=gen).to(device=device, dtype=dtype) for _ in range(2))
    w = (1.0 + 0.1 * torch.randn(case["hidden"], generator=gen)).to(device=device, dtype=dtype)
    return (x, z, w, 1e-6, case["group"])


GATED_RMS_NORM = Slot(
    name="gated_rms_norm",
    summary="Mamba2's gated RMS normalization per channel group: norm(x * silu(z)) * weight",
    signature=("gated_rms_norm(x: Tensor[T, H], z: Tensor[T, H], weight: Tensor[H], eps: float, group_size: int) "
               "-> Tensor[T, H]"),
    schema="(Tensor x, Tensor z, Tensor weight, float eps, int group_size) -> Tensor",
    fake=lambda x, z, weight, eps, group_size: x.new_empty(x.shape),
    reference=gated_rms_norm,
    make_inputs=_gated_norm_inputs,
    cases=GATED_NORM_CASES,
    traffic=lambda x, z, weight, eps, group_size: 2 * _nbytes(x) + _nbytes(z) + _nbytes(weight),
    entries={
        "vllm": ("CustomOp 'Mixer2RMSNormGated' (vllm.model_executor.layers.mamba.mamba_mixer2; Mamba2, Codestral "
                 "Mamba, NemotronH, Zamba2, Granite-4 hybrids), forward(x, gate), with its norm (use_rms_norm) and its "
                 "groups whole on each rank (one rank, or n_groups divisible by the ranks)",),
        "transformers": ("forward(x, gate) of each module whose class name ends in 'RMSNormGated' (1-D weight, eps; "
                         "its group_size if it has one), per instance, when its own forward agrees with the slot "
                         "(MambaRMSNormGated, BambaRMSNormGated, Zamba2RMSNormGated; not Qwen3-Next's, which gates "
                         "after the norm); x and gate flattened to rows",),
    },
    not_entered={
        "sglang": ("not hooked yet: SGLang 0.5.15's Mixer2RMSNormGated (mamba/mixer2_rms_norm_gated.py; NemotronH, "
                   "Falcon-H1) has the same math; none of the fk46 scenarios SGLang serves builds one"),
    },
)
