"""Route selected plugin kernels into a built transformers model, module instance by module instance.

transformers has no op registry: each module whose math is a catalog slot gets its ``forward`` replaced on
the instance (its class and transformers' files stay untouched). A candidate is routed only after its own
forward and the slot's native (``natives.py``) agree on a seeded input, so a look-alike with other math
(Gemma's ``1 + w`` norm, BitNet's MLP with its sub-norm) stays stock and is counted in ``probe.not_routed``.
A routed forward takes the module's one input alone: a call with any other argument runs the module's own
forward with every argument, counted in ``probe.not_routed`` with why.
"""
from __future__ import annotations

import torch

from fk_adapters import probe
from fk_adapters.engines import calls, install_common
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


def _checked(m, slot: str, routed, original):
    """``routed(x)`` for a call with the module's one input alone (by position or by its own name); any other
    call runs the module's own ``original`` with every argument, counted with why."""
    params = calls.Params(calls.Params.of(original, skip=0).names[:1], 1)
    where = type(m).__name__

    def forward(*args, **kwargs):
        why = calls.unknown(params, args, kwargs)
        if why:
            calls.left_stock(slot, f"{where}: {why}")
            return original(*args, **kwargs)
        return routed(args[0] if args else kwargs[params.names[0]])

    return forward


def _rms_forward(m, fn, original, eps_attr: str):
    label = f"rms_norm ({type(m).__name__}: called with an input dtype other than its weight's)"

    def routed(hidden_states):
        if hidden_states.dtype != m.weight.dtype:
            probe.not_routed[label] += 1
            return original(hidden_states)
        return fn(hidden_states, m.weight, float(getattr(m, eps_attr)))

    return _checked(m, "rms_norm", routed, original)


def _mlp_forward(m, fn, slot: str, extra: tuple, original):
    def routed(x):
        return m.down_proj(fn(torch.cat([m.gate_proj(x), m.up_proj(x)], dim=-1), *extra))

    return _checked(m, slot, routed, original)


def candidate(m) -> tuple[str | None, str, object] | None:
    """(slot or None, why not routable or "", builder(fn, original) -> forward) for a candidate module, else None.

    The slot is None for a gated MLP whose activation no slot has."""
    from torch import nn

    cls = type(m).__name__
    if cls.endswith("RMSNorm"):
        w, eps = getattr(m, "weight", None), _eps_attr(m)
        if not isinstance(w, nn.Parameter) or w.dim() != 1:
            return "rms_norm", "no 1-D weight parameter", None
        if eps is None:
            return "rms_norm", "no eps (variance_epsilon or eps) attribute", None
        return "rms_norm", "", lambda fn, original: _rms_forward(m, fn, original, eps)
    if all(isinstance(getattr(m, n, None), nn.Linear) for n in ("gate_proj", "up_proj", "down_proj")) \
            and isinstance(getattr(m, "act_fn", None), nn.Module):
        act = _activation(m.act_fn)
        if act is None:
            return None, f"activation {type(m.act_fn).__name__} is neither SiLU nor GELU", None
        slot, extra = act
        return slot, "", lambda fn, original: _mlp_forward(m, fn, slot, extra, original)
    return None


def _check_input(m, slot: str):
    p = next(m.parameters())
    width = m.weight.shape[0] if slot == "rms_norm" else m.gate_proj.in_features
    x = torch.randn(1, 3, width, generator=torch.Generator().manual_seed(0))
    return x.to(device=p.device, dtype=p.dtype)


def agrees(m, slot: str, forward, original) -> bool:
    """Does ``forward`` (the slot's native in place) give what the module's own forward gives?"""
    x = _check_input(m, slot)
    with torch.inference_mode():
        want, got = original(x), forward(x)
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
        slot, why, build = found
        cls = type(m).__name__
        slots = [slot] if slot else [s for s in GATED if s in ops_by_slot]
        if not slots or slots[0] not in ops_by_slot:
            continue
        if not why:
            original = m.forward
            try:
                ok = agrees(m, slot, build(NATIVES[slot], original), original)
            except Exception as exc:  # noqa: BLE001 - a module the check cannot run stays stock, with the reason
                ok, why = False, f"check failed: {type(exc).__name__}: {exc}"
            if ok:
                m.forward = build(ops_by_slot[slot], original)
                probe.constructed[slot] += 1
                desc = cls if slot == "rms_norm" else f"{cls} (gate/up concatenated)"
                if desc not in entered[slot]:
                    entered[slot].append(desc)
                continue
            why = why or DIFFERS.format(slot=slot)
        probe.left_stock(slots, f"{'/'.join(slots)} ({cls}: {why})")
    return entered


def install(model, chosen: dict) -> dict[str, list[str]]:
    """Wrap each chosen kernel as an fk op and route it into ``model``: {slot: [classes entered]}.

    A chosen slot transformers does not host (fused_add_rms_norm, rotary_embedding: HF has no such
    modules) enters nothing: [] (the runner reports it n/a)."""
    hosted = {s: v for s, v in chosen.items() if s in NATIVES}
    entered = route(model, install_common.wrap_chosen(hosted, NATIVES))
    return {s: entered.get(s, []) for s in chosen}
