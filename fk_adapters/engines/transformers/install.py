"""Route selected plugin kernels into a built transformers model, module instance by module instance.

transformers has no op registry: each module whose math is a catalog slot gets its ``forward`` replaced on
the instance (its class and transformers' files stay untouched). A candidate is routed only after its own
forward and the slot's native (``natives.py``) agree on a seeded input, so a look-alike with other math
(Gemma's ``1 + w`` norm, BitNet's MLP with its sub-norm) stays stock and is counted in ``probe.not_routed``.
A routed forward takes the module's own inputs alone (one; the experts' three): a call with any other argument runs
the module's own forward with every argument, counted in ``probe.not_routed`` with why.

``gemm`` enters every module whose type is exactly ``nn.Linear`` (a subclass, e.g. a quantized linear, stays stock);
``fused_moe`` every MoE experts module (``experts.py``), checked against the slot's reference, since its native is
the module's own forward. ``layer_norm`` and ``conv2d`` enter modules whose type is exactly ``nn.LayerNorm`` (over one
dim) / ``nn.Conv2d`` or ``nn.Conv1d`` (zero padding; a Conv1d as a conv2d over one row). The linear-attention / SSM
slots enter through the scan functions their mixers call (``recurrent.py``), ``sdpa`` through transformers' attention
registry (``attention.py``) and diffusers' (``diffusers_attention.py``).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fk_adapters import probe
from fk_adapters.engines import calls, install_common
from fk_adapters.engines.transformers import attention, diffusers_attention, experts, recurrent
from fk_adapters.engines.transformers.natives import NATIVES

# (atol, rtol) within which a module's own forward counts as the slot's math
AGREE = {torch.float32: (1e-5, 1e-4), torch.float16: (1e-3, 1e-2), torch.bfloat16: (1e-2, 2e-2)}
GATED = ("silu_and_mul", "gelu_and_mul")
TANH_GELUS = ("GELUTanh", "PytorchGELUTanh", "NewGELUActivation", "FastGELUActivation")  # transformers.activations
DIFFERS = "forward differs from {slot} (e.g. 1 + weight offset, an extra norm or scale)"


def _activation(act) -> tuple[str, tuple] | None:
    """(slot, extra args) for a SiLU or GELU activation module, None for any other."""
    from torch import nn
    from transformers import activations as A

    if isinstance(act, (nn.SiLU, A.SiLUActivation)):
        return "silu_and_mul", ()
    if isinstance(act, nn.GELU):
        return "gelu_and_mul", (act.approximate,)
    if isinstance(act, A.GELUActivation):
        return "gelu_and_mul", ("none",)
    tanh = tuple(c for c in (getattr(A, n, None) for n in TANH_GELUS) if isinstance(c, type))
    if isinstance(act, tanh):
        return "gelu_and_mul", ("tanh",)
    return None


def _eps_attr(m) -> str | None:
    for name in ("variance_epsilon", "eps"):
        if isinstance(getattr(m, name, None), (int, float)):
            return name
    return None


def _checked(m, slot: str, routed, original, inputs: int = 1):
    """``routed(*inputs)`` for a call with the module's first ``inputs`` inputs alone (by position or by their own
    names); any other call runs the module's own ``original`` with every argument, counted with why."""
    params = calls.Params(calls.Params.of(original, skip=0).names[:inputs], inputs)
    where = type(m).__name__

    def forward(*args, **kwargs):
        why = calls.unknown(params, args, kwargs)
        if why:
            calls.left_stock(slot, f"{where}: {why}")
            return original(*args, **kwargs)
        return routed(*args, *(kwargs[n] for n in params.names[len(args):]))

    return forward


def _rms_forward(m, fn, original, eps_attr: str):
    label = f"rms_norm ({type(m).__name__}: called with an input dtype other than its weight's)"

    def routed(hidden_states):
        if hidden_states.dtype != m.weight.dtype:
            probe.not_routed[label] += 1
            return original(hidden_states)
        return fn(hidden_states, m.weight, float(getattr(m, eps_attr)))

    return _checked(m, "rms_norm", routed, original)


def _gated_norm_forward(m, fn, original, eps_attr: str, group_size: int):
    def routed(hidden_states, gate):
        if gate is None:
            calls.left_stock("gated_rms_norm", f"{type(m).__name__}: no gate")
            return original(hidden_states, gate)
        width = hidden_states.shape[-1]
        y = fn(hidden_states.reshape(-1, width), gate.reshape(-1, width), m.weight, float(getattr(m, eps_attr)),
               group_size)
        return y.reshape(hidden_states.shape)

    return _checked(m, "gated_rms_norm", _same_dtype(m, "gated_rms_norm", routed, original), original, inputs=2)


def _mlp_forward(m, fn, slot: str, extra: tuple, original):
    def routed(x):
        return m.down_proj(fn(torch.cat([m.gate_proj(x), m.up_proj(x)], dim=-1), *extra))

    return _checked(m, slot, routed, original)


def _gemm_forward(m, fn, original):
    def routed(x):
        y = fn(x.reshape(-1, x.shape[-1]), m.weight, m.bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    return _checked(m, "gemm", routed, original)


def _same_dtype(m, slot: str, routed, original):
    """``routed(x, *rest)`` when ``x`` has the module's weight dtype, else the module's own forward, counted with
    why."""
    def call(x, *rest):
        w = m.weight
        if w is not None and x.dtype != w.dtype:
            calls.left_stock(slot, f"{type(m).__name__}: input {x.dtype}, weight {w.dtype}")
            return original(x, *rest)
        return routed(x, *rest)

    return call


def _layer_norm_forward(m, fn, original):
    def routed(x):
        return fn(x.reshape(-1, x.shape[-1]), m.weight, m.bias, float(m.eps)).reshape(x.shape)

    return _checked(m, "layer_norm", _same_dtype(m, "layer_norm", routed, original), original)


def _conv_forward(m, fn, padding: tuple, original):
    """A Conv2d's forward through the slot; a Conv1d's as a conv2d over one row ([N, C, L] -> [N, C, 1, L])."""
    row = m.weight.dim() == 3
    stride, dilation = ((1, *m.stride), (1, *m.dilation)) if row else (tuple(m.stride), tuple(m.dilation))
    padding = (0, *padding) if row else padding

    def routed(x):
        if x.dim() != m.weight.dim():
            calls.left_stock("conv2d", f"{type(m).__name__}: unbatched {x.dim()}-D input")
            return original(x)
        if row:
            # as torch's conv1d does it: a contiguous input viewed as one row (a permuted one would go as NHWC)
            y = fn(x.contiguous().unsqueeze(2), m.weight.unsqueeze(2), m.bias, stride, padding, dilation, m.groups)
            return y.squeeze(2)
        return fn(x, m.weight, m.bias, stride, padding, dilation, m.groups)

    return _checked(m, "conv2d", _same_dtype(m, "conv2d", routed, original), original)


def _experts_forward(m, fn, lay: experts.Layout, original):
    def routed(hidden_states, top_k_index, top_k_weights):
        w13, w2, b13, b2 = lay.args(m)
        return fn(hidden_states, w13, w2, top_k_weights, top_k_index, lay.activation, False, b13, b2, lay.alpha,
                  lay.limit, 1.0)

    return _checked(m, "fused_moe", routed, original, inputs=3)


def _one_input(m, width: int, shape: tuple = (1, 3), seed: int = 0):
    """A seeded [*shape, width] input in the module's dtype and device (float32 on a CPU for a module without
    parameters), as a one-element args tuple."""
    p = next(m.parameters(), torch.empty(0))
    x = torch.randn(*shape, width, generator=torch.Generator().manual_seed(seed))
    return (x.to(device=p.device, dtype=p.dtype),)


@dataclass(frozen=True)
class Candidate:
    """A module some slot may enter: ``slot`` (None: a gated MLP whose activation no slot has), ``why`` it cannot
    (or ""), ``build(fn, original) -> forward``, ``desc`` (how it is listed where it entered) and ``check_args()``
    (the seeded inputs of the agreement check)."""

    slot: str | None
    why: str = ""
    build: Callable | None = None
    desc: str = ""
    check_args: Callable | None = None


def _linear_candidate(m, cls: str) -> Candidate:
    from torch import nn

    if type(m) is not nn.Linear:
        return Candidate("gemm", "a subclass of nn.Linear (its own forward, e.g. quantized)")
    w = m.weight
    if not (type(w.data) is torch.Tensor and w.is_floating_point()):
        return Candidate("gemm", f"weight is a {type(w.data).__name__} of {w.dtype} (quantized)")
    return Candidate("gemm", "", lambda fn, original: _gemm_forward(m, fn, original), cls,
                     lambda: _one_input(m, m.in_features))


def _layer_norm_candidate(m, cls: str) -> Candidate:
    from torch import nn

    if type(m) is not nn.LayerNorm:
        return Candidate("layer_norm", "a subclass of nn.LayerNorm (its own forward)")
    if len(m.normalized_shape) != 1:
        return Candidate("layer_norm", f"normalizes over {len(m.normalized_shape)} dims")
    return Candidate("layer_norm", "", lambda fn, original: _layer_norm_forward(m, fn, original), cls,
                     lambda: _one_input(m, m.normalized_shape[0]))


def _int_padding(m) -> tuple | str:
    """The module's padding as (rows, columns) on each side, or why the slot cannot take it."""
    if m.padding == "valid":
        return (0, 0)
    if m.padding == "same":
        total = [d * (k - 1) for d, k in zip(m.dilation, m.kernel_size)]
        if any(t % 2 for t in total):
            return "padding 'same' with an even kernel extent (pads one side more)"
        return tuple(t // 2 for t in total)
    return tuple(m.padding)


def _conv_candidate(m, cls: str, kind) -> Candidate:
    """``kind``: nn.Conv2d, or nn.Conv1d (entered as a conv2d over one row)."""
    from torch import nn

    if type(m) is not kind:
        return Candidate("conv2d", f"a subclass of nn.{kind.__name__} (its own forward)")
    if m.padding_mode != "zeros":
        return Candidate("conv2d", f"padding_mode '{m.padding_mode}' (the slot pads with zeros)")
    padding = _int_padding(m)
    if isinstance(padding, str):
        return Candidate("conv2d", padding)
    row = kind is nn.Conv1d
    if row and 2 * padding[0] > m.dilation[0] * (m.kernel_size[0] - 1):
        return Candidate("conv2d", f"padding {padding[0]} on each side of a {m.kernel_size[0]}-wide kernel: a causal "
                                   "short convolution, trimmed by its mixer (which often takes only its weight)")
    size = [d * (k - 1) + 1 + 2 * s for d, k, s in zip(m.dilation, m.kernel_size, m.stride)]
    desc = f"{cls} (as a conv2d over one row)" if row else cls
    return Candidate("conv2d", "", lambda fn, original: _conv_forward(m, fn, padding, original), desc,
                     lambda: _one_input(m, size[-1], (2, m.in_channels, *size[:-1])))


def _experts_candidate(m, cls: str) -> Candidate:
    lay = experts.layout(m, _activation)
    if isinstance(lay, str):
        return Candidate("fused_moe", lay)
    return Candidate("fused_moe", "", lambda fn, original: _experts_forward(m, fn, lay, original), lay.describe(cls),
                     lambda: experts.check_args(m, lay))


def candidate(m) -> Candidate | None:
    """The Candidate for a module some slot may enter, else None."""
    from torch import nn

    cls = type(m).__name__
    if isinstance(m, nn.Linear):
        return _linear_candidate(m, cls)
    if isinstance(m, nn.LayerNorm):
        return _layer_norm_candidate(m, cls)
    for kind in (nn.Conv2d, nn.Conv1d):
        if isinstance(m, kind):
            return _conv_candidate(m, cls, kind)
    if experts.is_experts(m):
        return _experts_candidate(m, cls)
    if cls.endswith("RMSNormGated"):  # Mamba2's gated norm (NemotronH's per group)
        w, eps = getattr(m, "weight", None), _eps_attr(m)
        if not isinstance(w, nn.Parameter) or w.dim() != 1 or eps is None:
            return Candidate("gated_rms_norm", "no 1-D weight parameter or no eps attribute")
        group = int(getattr(m, "group_size", 0) or w.shape[0])
        return Candidate("gated_rms_norm", "", lambda fn, original: _gated_norm_forward(m, fn, original, eps, group),
                         cls, lambda: _one_input(m, w.shape[0]) + _one_input(m, w.shape[0], seed=1))
    if cls.endswith("RMSNorm"):
        w, eps = getattr(m, "weight", None), _eps_attr(m)
        if not isinstance(w, nn.Parameter) or w.dim() != 1:
            return Candidate("rms_norm", "no 1-D weight parameter")
        if eps is None:
            return Candidate("rms_norm", "no eps (variance_epsilon or eps) attribute")
        return Candidate("rms_norm", "", lambda fn, original: _rms_forward(m, fn, original, eps), cls,
                         lambda: _one_input(m, w.shape[0]))
    if all(isinstance(getattr(m, n, None), nn.Linear) for n in ("gate_proj", "up_proj", "down_proj")) \
            and isinstance(getattr(m, "act_fn", None), nn.Module):
        act = _activation(m.act_fn)
        if act is None:
            return Candidate(None, f"activation {type(m.act_fn).__name__} is neither SiLU nor GELU")
        slot, extra = act
        return Candidate(slot, "", lambda fn, original: _mlp_forward(m, fn, slot, extra, original),
                         f"{cls} (gate/up concatenated)", lambda: _one_input(m, m.gate_proj.in_features))
    return None


def checked_with(slot: str):
    """What a module's own forward is checked against: the slot's native, or for ``fused_moe`` (whose native is
    that very forward) the slot's reference."""
    if slot == "fused_moe":
        from fk_adapters.tasks import SLOTS

        return SLOTS[slot].reference
    return NATIVES[slot]


def agrees(found: Candidate, forward, original) -> bool:
    """Does ``forward`` (the slot's math in place) give what the module's own forward gives?"""
    args = found.check_args()
    with torch.inference_mode():
        want, got = original(*args), forward(*args)
    if not (isinstance(want, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype):
        return False
    atol, rtol = AGREE.get(want.dtype, AGREE[torch.float32])
    return bool(torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol))


def route(model, ops_by_slot: dict) -> dict[str, list[str]]:
    """Replace ``forward`` of every module instance of ``model`` whose math is one of the slots given.

    ``ops_by_slot``: {slot: the wrapped op}. Returns {slot: [descriptions of the classes entered]}.
    """
    entered: dict[str, list[str]] = {s: [] for s in ops_by_slot}
    for _, m in model.named_modules():
        found = candidate(m)
        if found is None:
            continue
        slot, why = found.slot, found.why
        cls = type(m).__name__
        slots = [slot] if slot else [s for s in GATED if s in ops_by_slot]
        if not slots or slots[0] not in ops_by_slot:
            continue
        if not why:
            original = m.forward
            try:
                ok = agrees(found, found.build(checked_with(slot), original), original)
            except Exception as exc:  # noqa: BLE001 - a module the check cannot run stays stock, with the reason
                ok, why = False, f"check failed: {type(exc).__name__}: {exc}"
            if ok:
                m.forward = found.build(ops_by_slot[slot], original)
                if slot == "fused_moe":
                    experts.register(m, experts.layout(m, _activation))
                probe.constructed[slot] += 1
                if found.desc not in entered[slot]:
                    entered[slot].append(found.desc)
                continue
            why = why or DIFFERS.format(slot=slot)
        probe.left_stock(slots, f"{'/'.join(slots)} ({cls}: {why})")
    return entered


def install(model, chosen: dict) -> dict[str, list[str]]:
    """Wrap each chosen kernel as an fk op and route it into ``model``: {slot: [classes entered]}.

    A chosen slot transformers does not host (fused_add_rms_norm, rotary_embedding: HF has no such
    modules) enters nothing: [] (the runner reports it n/a)."""
    hosted = {s: v for s, v in chosen.items() if s in NATIVES}
    ops = install_common.wrap_chosen(hosted, NATIVES)
    install_common.engine_own_ops(hosted, NATIVES)  # marked in the load record: no speedup is claimed for them
    entered = route(model, {s: op for s, op in ops.items() if s not in (*recurrent.SLOTS, attention.SLOT)})
    entered |= recurrent.route(model, {s: op for s, op in ops.items() if s in recurrent.SLOTS})
    if attention.SLOT in ops:
        entered[attention.SLOT] = [*attention.route(model, ops[attention.SLOT]),
                                   *diffusers_attention.route(model, ops[attention.SLOT])]
    return {s: entered.get(s, []) for s in chosen}
