"""transformers' MoE experts modules in the ``fused_moe`` slot's layout, and their own forward as its native.

Every experts class decorated with ``@use_experts_implementation`` (MixtralExperts, Qwen3MoeExperts,
Qwen3NextExperts, DeepseekV3Experts, GptOssExperts, ...) carries the decorator's layout flags on the instance:
``is_transposed`` (``gate_up_proj`` [E, H, 2I] and ``down_proj`` [E, I, H], GPT-OSS), ``is_concatenated``
(False: gate and up rows interleaved, GPT-OSS's clamped "swigluoai"), ``has_bias`` and ``has_gate``. The
forward takes ``(hidden_states [T, H], top_k_index [T, k], top_k_weights [T, k])`` after routing and dispatches
on the model's ``experts_implementation`` (eager loop, grouped_mm, ...). Routing weights arrive with any scaling
already folded in (DeepSeek), so the slot's ``routed_scaling_factor`` is 1.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

DEFAULT_ALPHA, DEFAULT_LIMIT = 1.702, 7.0  # what the slot is given for activations that ignore them
_FLAGS = ("is_transposed", "is_concatenated", "has_bias", "has_gate")


@dataclass(frozen=True)
class Layout:
    """How a module's parameters map to the slot's ``(w13, w2, ..., alpha, limit)``."""

    transposed: bool
    bias: bool
    activation: str
    alpha: float
    limit: float

    def args(self, m) -> tuple:
        """(w13, w2, w13_bias, w2_bias): views of the module's parameters in the slot's layout, made per call
        (strided for a transposed module: no copy of the experts' weights)."""
        w13, w2 = m.gate_up_proj, m.down_proj
        if self.transposed:
            w13, w2 = w13.mT, w2.mT
        if self.bias:
            return w13, w2, m.gate_up_proj_bias, m.down_proj_bias
        return w13, w2, None, None

    def describe(self, cls: str) -> str:
        notes = [n for n, on in (("transposed", self.transposed), ("biases", self.bias)) if on]
        return f"{cls} ({', '.join([self.activation, *notes])})"


def is_experts(m) -> bool:
    """Does ``m`` carry the ``@use_experts_implementation`` flags?"""
    return all(hasattr(m, f) for f in _FLAGS) and hasattr(m, "config")


def layout(m, gated) -> Layout | str:
    """The module's Layout, or why it has none. ``gated(act_fn)``: ("silu_and_mul", ()) or
    ("gelu_and_mul", (approximate,)) for an activation module, None for any other."""
    if not m.has_gate:
        return "no gate projection (has_gate=False)"
    if getattr(m, "_is_expert_parallel", False):  # set by transformers 5.19's experts init, absent in 5.17's
        return "expert parallel (ids local to this rank)"
    ps = [getattr(m, n, None) for n in ("gate_up_proj", "down_proj")]
    if not all(isinstance(p, torch.Tensor) and p.dim() == 3 and p.is_floating_point() for p in ps):
        return "gate_up_proj / down_proj are not 3-D floating tensors (quantized experts?)"
    if m.has_bias and not all(isinstance(getattr(m, n, None), torch.Tensor)
                              for n in ("gate_up_proj_bias", "down_proj_bias")):
        return "has_bias without gate_up_proj_bias / down_proj_bias"
    if not m.is_concatenated:
        alpha, limit = getattr(m, "alpha", DEFAULT_ALPHA), getattr(m, "limit", DEFAULT_LIMIT)
        return Layout(m.is_transposed, m.has_bias, "swigluoai", float(alpha), float(limit))
    act = gated(getattr(m, "act_fn", None))
    if act is None:
        return f"activation {type(getattr(m, 'act_fn', None)).__name__} is neither SiLU nor GELU"
    name = "silu" if act[0] == "silu_and_mul" else ("gelu_tanh" if act[1] == ("tanh",) else "gelu")
    return Layout(m.is_transposed, m.has_bias, name, DEFAULT_ALPHA, DEFAULT_LIMIT)


def check_args(m, lay: Layout, tokens: int = 4) -> tuple:
    """A seeded ``(hidden_states, top_k_index, top_k_weights)``: distinct experts per token, float32 weights
    summing to 1 (as Mixtral's router gives)."""
    p = m.gate_up_proj
    n_experts, hidden = p.shape[0], p.shape[1] if lay.transposed else p.shape[2]
    k = min(int(getattr(m.config, "num_experts_per_tok", 2) or 2), n_experts)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, hidden, generator=gen).to(device=p.device, dtype=p.dtype)
    ids = torch.stack([torch.randperm(n_experts, generator=gen)[:k] for _ in range(tokens)]).to(p.device)
    weights = torch.randn(tokens, k, generator=gen).softmax(-1).to(p.device)
    return x, ids, weights


# ----------------------------------------------------------------------------- the native: the module's own forward

_routed: dict[int, tuple[weakref.ref, Layout]] = {}  # id(module) -> (the module, its layout)
_by_weight: dict[int, int] = {}  # gate_up_proj.data_ptr() -> id(module), rebuilt on a miss


def register(m, lay: Layout) -> None:
    """``m`` is routed: a slot call with its own parameters runs its own forward (``native``)."""
    _routed[id(m)] = (weakref.ref(m), lay)
    _by_weight[m.gate_up_proj.data_ptr()] = id(m)


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()


def _is_owner(key, args: tuple, act: tuple):
    ref, lay = _routed.get(key, (lambda: None, None))
    m = ref()
    if m is None or (lay.activation, lay.alpha, lay.limit) != act:
        return None
    return m if all(_same(a, b) for a, b in zip(args, lay.args(m))) else None


def _owner(w13, w2, b13, b2, activation, alpha, limit):
    """The routed module whose parameters (and activation) these slot arguments are, else None."""
    args, act = (w13, w2, b13, b2), (activation, alpha, limit)
    m = _is_owner(_by_weight.get(w13.data_ptr()), args, act)
    if m is None:  # parameters moved since (model.to(...)): look again
        _by_weight.clear()
        _by_weight.update((r().gate_up_proj.data_ptr(), k) for k, (r, _) in _routed.items() if r() is not None)
        m = _is_owner(_by_weight.get(w13.data_ptr()), args, act)
    return m


def native(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, w13_bias, w2_bias,
           alpha, limit, routed_scaling_factor):
    """The slot through transformers: the owning module's own forward (the experts implementation the model is
    configured with, bit for bit) when the arguments are a routed module's parameters as its routed forward
    passes them; the slot's reference math for any other call."""
    m = None
    if not apply_router_weight_on_input and routed_scaling_factor == 1.0:
        m = _owner(w13, w2, w13_bias, w2_bias, activation, alpha, limit)
    if m is not None:
        return type(m).forward(m, x, topk_ids, topk_weights)
    from fk_adapters.tasks import SLOTS

    return SLOTS["fused_moe"].reference(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input,
                                        w13_bias, w2_bias, alpha, limit, routed_scaling_factor)
