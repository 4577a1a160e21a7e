"""Gated activation slots: act(x[..., :d]) * x[..., d:]."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fk_adapters.tasks.slot import Slot, acc, nbytes

ACT_CASES = ({"tokens": 1, "d": 128}, {"tokens": 9, "d": 352}, {"tokens": 33, "d": 2048})
GELU_CASES = tuple(dict(c, approximate=a) for c in ACT_CASES for a in ("none", "tanh"))


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """out = silu(x[..., :d]) * x[..., d:], d = x.shape[-1] // 2 (float32 math)."""
    d = x.shape[-1] // 2
    xf = acc(x)
    return (F.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)


def gelu_and_mul(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """out = gelu(x[..., :d], approximate) * x[..., d:]; approximate is "none" (erf) or "tanh"."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', not {approximate!r}")
    d = x.shape[-1] // 2
    xf = acc(x)
    return (F.gelu(xf[..., :d], approximate=approximate) * xf[..., d:]).to(x.dtype)


def _act_inputs(case, dtype, device, gen):
    x = 2.0 * torch.randn(case["tokens"], 2 * case["d"], generator=gen)
    x = x.to(device=device, dtype=dtype)
    return (x, case["approximate"]) if "approximate" in case else (x,)


SILU_AND_MUL = Slot(
    name="silu_and_mul",
    summary="SwiGLU gate: silu(gate) * up",
    signature="silu_and_mul(x: Tensor[..., 2d]) -> Tensor[..., d]",
    schema="(Tensor x) -> Tensor",
    fake=lambda x: x.new_empty(x.shape[:-1] + (x.shape[-1] // 2,)),
    reference=silu_and_mul,
    make_inputs=_act_inputs,
    cases=ACT_CASES,
    traffic=lambda x: nbytes(x) * 3 // 2,
    growth=2,  # gate times up
    entries={
        "vllm": ("CustomOp 'SiluAndMul' (vllm.model_executor.layers.activation)",),
        "sglang": ("SiluAndMul.forward_cuda (sglang.srt.layers.activation)",),
        "transformers": ("forward(x) of each gated MLP module (gate_proj, up_proj, down_proj, act_fn SiLU), "
                         "per instance: "
                         "down_proj(op(cat(gate_proj(x), up_proj(x)))), when it agrees with the module's own forward",),
    },
)

GELU_AND_MUL = Slot(
    name="gelu_and_mul",
    summary="GeGLU gate: gelu(gate) * up, exact (erf) or tanh approximation",
    signature="gelu_and_mul(x: Tensor[..., 2d], approximate: str) -> Tensor[..., d]",
    schema="(Tensor x, str approximate) -> Tensor",
    fake=lambda x, approximate: x.new_empty(x.shape[:-1] + (x.shape[-1] // 2,)),
    reference=gelu_and_mul,
    make_inputs=_act_inputs,
    cases=GELU_CASES,
    traffic=lambda x, approximate: nbytes(x) * 3 // 2,
    growth=2,
    entries={
        "vllm": ("CustomOp 'GeluAndMul' (vllm.model_executor.layers.activation), approximate 'none' or 'tanh'",),
        "sglang": ("GeluAndMul.forward_cuda (sglang.srt.layers.activation)",),
        "transformers": ("forward(x) of each gated MLP module "
                         "(gate_proj, up_proj, down_proj, act_fn GELU exact or tanh), "
                         "per instance: down_proj(op(cat(gate_proj(x), up_proj(x)), approximate)), when it agrees with "
                         "the module's own forward",),
    },
)
