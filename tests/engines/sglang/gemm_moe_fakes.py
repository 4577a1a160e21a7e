"""Stand-ins for SGLang 0.5.15's linear and MoE method objects (no SGLang here): only what the adapters read."""
from __future__ import annotations

import types
from typing import NamedTuple

import torch


class StandardTopKOutput(NamedTuple):  # the adapter checks the class name, as SGLang's TopKOutputChecker checks type
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor
    router_logits: torch.Tensor | None


class Backend:
    def __init__(self, name: str = "TRITON"):
        self.name = name

    def is_triton(self) -> bool:
        return self.name == "TRITON"


def moe_config(**kw):
    cfg = dict(activation="silu", is_gated=True, apply_router_weight_on_input=False, no_combine=False,
               routed_scaling_factor=None, gemm1_alpha=None, gemm1_clamp_limit=None, swiglu_limit=None,
               gate_up_interleaved=True, num_experts=4, num_local_experts=4)
    cfg.update(kw)
    return types.SimpleNamespace(**cfg)


def moe_method(backend: str = "TRITON", aiter=None, **cfg):
    """An UnquantizedFusedMoEMethod after create_moe_runner."""
    return types.SimpleNamespace(runner=types.SimpleNamespace(runner_backend=Backend(backend)),
                                 moe_runner_config=moe_config(**cfg), _aiter_runner=aiter)


def moe_layer(experts: int = 4, hidden: int = 8, inter: int = 6, w13=None, w2=None, b13=None, b2=None):
    w13 = torch.randn(experts, 2 * inter, hidden) if w13 is None else w13
    w2 = torch.randn(experts, hidden, inter) if w2 is None else w2
    return types.SimpleNamespace(w13_weight=w13, w2_weight=w2, w13_weight_bias=b13, w2_weight_bias=b2)


def dispatch(x, weights=None, ids=None, topk=None, scale=None):
    t = x.shape[0]
    topk = topk or StandardTopKOutput(torch.full((t, 2), 0.5) if weights is None else weights,
                                      torch.zeros(t, 2, dtype=torch.int32) if ids is None else ids, None)
    return types.SimpleNamespace(hidden_states=x, hidden_states_scale=scale, topk_output=topk)


def call_for_case(slot: str, case_args: tuple):
    """(method, the call after it, kwargs) that make SGLang's hooked method take one catalog case."""
    if slot == "gemm":
        x, w, bias = case_args
        return types.SimpleNamespace(), (types.SimpleNamespace(weight=torch.nn.Parameter(w)), x, bias), {}
    x, w13, w2, weights, ids, activation, on_input, b13, b2, alpha, limit, scaling = case_args
    swiglu = activation == "swigluoai"
    method = moe_method(activation="silu" if swiglu else activation, apply_router_weight_on_input=on_input,
                        routed_scaling_factor=scaling, gemm1_alpha=alpha if swiglu else None,
                        gemm1_clamp_limit=limit if swiglu else None, num_experts=w13.shape[0],
                        num_local_experts=w13.shape[0])
    layer = moe_layer(w13=w13, w2=w2, b13=b13, b2=b2)
    return method, (layer, dispatch(x, weights, ids)), {}
