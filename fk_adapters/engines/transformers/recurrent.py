"""The linear-attention / SSM slots in transformers: the scan functions a mixer's forward calls, swapped in its module.

Gated DeltaNet mixers (Qwen3-Next, Qwen3.5, OLMo-Hybrid, ...) call the module globals
``torch_chunk_gated_delta_rule`` / ``torch_recurrent_gated_delta_rule``; Mamba2 mixers (Mamba2, Bamba, Falcon-H1,
NemotronH, GraniteMoeHybrid, Zamba2) call ``mamba2_chunk_scan`` / ``mamba2_selective_state_update``. Each forward reads
the global at call time, so replacing it in the model's module reaches every call (the classes and transformers' files
stay untouched). The replacement maps a padded batch ``[B, T, ...]`` to the slot's varlen interface over a pool of B
states (GDN's K-major ``[B, HV, K, V]`` state transposed to the slot's ``[S, HV, V, K]``) and back. It replaces a
function only after the function and the slot's reference, through the same mapping, agree on seeded inputs of the
mixer's own sizes; a call the slot cannot express (packed varlen ``cu_seqlens``, ``z``, a dt clamp, per-element dt/A/D)
runs the model's own function, counted with why. ``docs/design/linear-attention-ssm.md`` section 4.
"""
from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from fk_adapters import probe
from fk_adapters.engines import calls

AGREE = {torch.float32: (1e-4, 1e-3), torch.float16: (2e-3, 2e-2), torch.bfloat16: (2e-2, 4e-2)}


@dataclass(frozen=True)
class Swap:
    """One module-level function a mixer calls, the slot it maps to, ``adapt(op, original) -> replacement`` and
    ``check_args(mixer) -> (args, kwargs)`` of the agreement check."""

    function: str
    slot: str
    adapt: Callable
    check_args: Callable


def _tensor_kwargs(kwargs: dict) -> str:
    """Why extra keyword arguments keep a call stock: the models forward their own flags (use_cache,
    output_router_logits, ...), which the scans ignore; a tensor among them may carry meaning the slot lacks."""
    tensors = sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))
    return f"tensor arguments {tensors}" if tensors else ""


# -------------------------------------------------------------------------------------------------- Gated DeltaNet
def _gdn_call(op, q, k, v, g, beta, initial_state, output_final_state, use_qk_l2norm, decode: bool):
    """q, k [B, T, HV, K] (already at the value heads), v [B, T, HV, V], g and beta [B, T, HV], initial_state
    [B, HV, K, V] | None -> (o [B, T, HV, V], final state [B, HV, K, V] float32 | None)."""
    b, t, hv, kd = k.shape
    vd = v.shape[-1]
    flat = [x.reshape(b * t, *x.shape[2:]) for x in (q, k, v, g, beta)]
    pool = torch.zeros(b, hv, vd, kd, dtype=torch.float32, device=v.device)
    if initial_state is not None:
        pool.copy_(initial_state.transpose(-1, -2))
    idx = torch.arange(b, dtype=torch.int32, device=v.device)
    out = torch.empty(b * t, hv, vd, dtype=v.dtype, device=v.device)
    if decode:
        op(*flat, pool, idx, kd ** -0.5, use_qk_l2norm, out)
    else:
        cu = torch.arange(b + 1, dtype=torch.int32, device=v.device) * t
        has = torch.full((b,), initial_state is not None, dtype=torch.bool, device=v.device)
        op(*flat, pool, idx, cu, has, kd ** -0.5, use_qk_l2norm, out)
    return out.view(b, t, hv, vd), (pool.transpose(-1, -2) if output_final_state else None)


def _gdn_why(query, cu_seqlens, kwargs, decode: bool) -> str:
    if cu_seqlens is not None:
        return "packed varlen batch (cu_seqlens)"
    if decode and query.shape[1] != 1:
        return "more than one token per sequence"
    return _tensor_kwargs(kwargs)


def _gdn_adapt(slot: str, decode: bool):
    def adapt(op, original):
        def replacement(query, key, value, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                        use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
            why = _gdn_why(query, cu_seqlens, kwargs, decode)
            if why:
                calls.left_stock(slot, f"{original.__name__}: {why}")
                return original(query, key, value, g, beta, chunk_size=chunk_size, initial_state=initial_state,
                                output_final_state=output_final_state,
                                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens, **kwargs)
            return _gdn_call(op, query, key, value, g, beta, initial_state, output_final_state,
                             use_qk_l2norm_in_kernel, decode)

        if decode:  # the recurrent function has no chunk_size: keep the keyword order of the original
            def recurrent(query, key, value, g, beta, initial_state=None, output_final_state=False,
                          use_qk_l2norm_in_kernel=False, cu_seqlens=None, **kwargs):
                return replacement(query, key, value, g, beta, initial_state=initial_state,
                                   output_final_state=output_final_state,
                                   use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, cu_seqlens=cu_seqlens, **kwargs)
            return recurrent
        return replacement

    return adapt


def _gdn_check_args(decode: bool):
    def check_args(m):
        p = next(m.parameters())
        gen = torch.Generator().manual_seed(0)
        b, t, hv, kd, vd = 2, 1 if decode else 5, m.num_v_heads, m.head_k_dim, m.head_v_dim

        def rand(*shape, dtype=p.dtype):
            return torch.randn(*shape, generator=gen).to(device=p.device, dtype=dtype)

        g = -(0.01 + torch.rand(b, t, hv, generator=gen)).to(p.device)
        beta = torch.rand(b, t, hv, generator=gen).to(device=p.device, dtype=p.dtype)
        return (rand(b, t, hv, kd), rand(b, t, hv, kd), rand(b, t, hv, vd), g, beta), {
            "initial_state": 0.1 * rand(b, hv, kd, vd, dtype=torch.float32), "output_final_state": True,
            "use_qk_l2norm_in_kernel": True}

    return check_args


# -------------------------------------------------------------------------------------------------- Mamba2 (SSD)
def _per_head(x, trailing: int):
    """``x`` expanded from [H] along its ``trailing`` last dims (stride 0), as [H]; None when it is not."""
    if x is None or x.dim() != 1 + trailing or any(s != 0 for s in x.stride()[1:]):
        return None
    return x[(slice(None),) + (0,) * trailing]


def _ssm_why(z, kwargs, dt_softplus) -> str:
    if z is not None:
        return "z (gated output)"
    if not dt_softplus:
        return "dt_softplus off"
    return _tensor_kwargs(kwargs)


def _ssd_adapt(op, original):
    def replacement(hidden_states, dt, A, B, C, chunk_size, D=None, dt_bias=None, initial_states=None,
                    dt_softplus=False, dt_limit=(0.0, float("inf")), return_final_states=False, **kwargs):
        z = kwargs.pop("z", None)
        why = _ssm_why(z, kwargs, dt_softplus) or (
            f"dt clamped to {tuple(dt_limit)}" if tuple(dt_limit) != (0.0, float("inf"))
            else "per-element D" if D is not None and D.dim() != 1 else "")
        if why:
            calls.left_stock("ssd_chunk_scan", f"{original.__name__}: {why}")
            return original(hidden_states, dt, A, B, C, chunk_size, D=D, dt_bias=dt_bias,
                            initial_states=initial_states, dt_softplus=dt_softplus, dt_limit=dt_limit,
                            return_final_states=return_final_states, z=z, **kwargs)
        b, t, h, pd = hidden_states.shape
        dev = hidden_states.device
        pool = torch.zeros(b, h, pd, B.shape[-1], dtype=torch.float32, device=dev)
        if initial_states is not None:
            pool.copy_(initial_states)
        out = torch.empty(b * t, h, pd, dtype=hidden_states.dtype, device=dev)
        bias = dt_bias if dt_bias is not None else torch.zeros(h, dtype=dt.dtype, device=dev)
        op(hidden_states.reshape(b * t, h, pd), dt.reshape(b * t, h), A, B.reshape(b * t, *B.shape[2:]),
           C.reshape(b * t, *C.shape[2:]), D, bias, pool, torch.arange(b, dtype=torch.int32, device=dev),
           torch.arange(b + 1, dtype=torch.int32, device=dev) * t,
           torch.full((b,), initial_states is not None, dtype=torch.bool, device=dev), out)
        out = out.view(b, t, h, pd)
        return (out, pool) if return_final_states else out

    return replacement


def _ssu_adapt(op, original):
    def replacement(state, hidden_states, dt, A, B, C, D=None, dt_bias=None, dt_softplus=False, z=None, **kwargs):
        expanded = (dt.dim() == 3 and dt.stride(-1) == 0 and _per_head(A, 2) is not None
                    and all(x is None or _per_head(x, 1) is not None for x in (D, dt_bias)))
        why = _ssm_why(z, kwargs, dt_softplus) or (
            "" if expanded else "dt, A, D or dt_bias not expanded per head (stride 0 along head_dim / state)")
        if why:
            calls.left_stock("ssm_state_update", f"{original.__name__}: {why}")
            return original(state, hidden_states, dt, A, B, C, D=D, dt_bias=dt_bias, dt_softplus=dt_softplus, z=z,
                            **kwargs)
        b, h, _ = hidden_states.shape
        dev = hidden_states.device
        bias = dt_bias[:, 0] if dt_bias is not None else torch.zeros(h, dtype=dt.dtype, device=dev)
        out = torch.empty_like(hidden_states)
        op(hidden_states, dt[:, :, 0], A[:, 0, 0], B, C, None if D is None else D[:, 0], bias, state,
           torch.arange(b, dtype=torch.int32, device=dev), out)
        return out

    return replacement


def _ssd_check_args(decode: bool):
    def check_args(m):
        p = next(m.parameters())
        gen = torch.Generator().manual_seed(0)
        b, t, h, pd, g, n = 2, 5, m.num_heads, m.head_dim, m.n_groups, m.ssm_state_size

        def rand(*shape, dtype=p.dtype, scale=1.0):
            return (scale * torch.randn(*shape, generator=gen)).to(device=p.device, dtype=dtype)

        a = -(1 + 15 * torch.rand(h, generator=gen)).to(p.device)
        dt_bias = torch.log(torch.expm1(0.001 + 0.099 * torch.rand(h, generator=gen))).to(p.device, p.dtype)
        d = rand(h)
        if decode:
            return (rand(b, h, pd, n, dtype=torch.float32, scale=0.1), rand(b, h, pd), rand(b, h, 1).expand(-1, -1, pd),
                    a[:, None, None].expand(-1, pd, n), rand(b, g, n), rand(b, g, n)), {
                "D": d[:, None].expand(-1, pd), "dt_bias": dt_bias[:, None].expand(-1, pd), "dt_softplus": True}
        return (rand(b, t, h, pd), rand(b, t, h), a, rand(b, t, g, n), rand(b, t, g, n), m.chunk_size), {
            "D": d, "dt_bias": dt_bias, "initial_states": rand(b, h, pd, n, dtype=torch.float32, scale=0.1),
            "dt_softplus": True, "dt_limit": tuple(m.time_step_limit), "return_final_states": True}

    return check_args


SWAPS = (Swap("torch_chunk_gated_delta_rule", "gated_delta_rule", _gdn_adapt("gated_delta_rule", False),
              _gdn_check_args(False)),
         Swap("torch_recurrent_gated_delta_rule", "gated_delta_rule_decode",
              _gdn_adapt("gated_delta_rule_decode", True), _gdn_check_args(True)),
         Swap("mamba2_chunk_scan", "ssd_chunk_scan", _ssd_adapt, _ssd_check_args(False)),
         Swap("mamba2_selective_state_update", "ssm_state_update", _ssu_adapt, _ssd_check_args(True)))
SLOTS = tuple(s.slot for s in SWAPS)
_ORIGINAL_ATTR = "_fk_original"


def original(module, function: str):
    """The model's own ``function`` of ``module`` (a python module), whether or not fk swapped it."""
    fn = getattr(module, function)
    return getattr(fn, _ORIGINAL_ATTR, fn)


def _calls(m) -> list[Swap]:
    """The swaps whose function ``m``'s class calls from its forward and its module defines."""
    forward = getattr(type(m), "forward", None)
    code = getattr(inspect.unwrap(forward), "__code__", None) if callable(forward) else None
    module = sys.modules.get(type(m).__module__)
    return [s for s in SWAPS if code is not None and s.function in code.co_names
            and callable(getattr(module, s.function, None))]


def _outputs(x) -> list:
    return [t for t in (x if isinstance(x, tuple) else (x,)) if isinstance(t, torch.Tensor)]


def agrees(swap: Swap, m, fn: Callable, own: Callable) -> bool:
    """Do the model's own function and ``fn`` (the slot's reference through the mapping) agree on the mixer's sizes?
    A check whose call the mapping left stock proves nothing: it fails (and is not counted as a stock call)."""
    args, kwargs = swap.check_args(m)
    decode_ssm = swap.slot == "ssm_state_update"  # its state (the first argument) is updated in place
    mine = [args[0].clone(), *args[1:]] if decode_ssm else list(args)
    stock_before = probe.not_routed.copy()
    with torch.inference_mode():
        want, got = _outputs(own(*args, **kwargs)), _outputs(fn(*mine, **kwargs))
    mapped = probe.not_routed == stock_before
    probe.not_routed.clear()
    probe.not_routed.update(stock_before)
    if decode_ssm:
        want, got = want + [args[0]], got + [mine[0]]
    if not mapped or len(want) != len(got):
        return False
    for w, g in zip(want, got):
        atol, rtol = AGREE.get(w.dtype, AGREE[torch.float32])
        if g.shape != w.shape or g.dtype != w.dtype or not torch.allclose(g.float(), w.float(), atol=atol, rtol=rtol):
            return False
    return True


def route(model, ops_by_slot: dict) -> dict[str, list[str]]:
    """Swap each scan function the model's mixers call for its slot's op, once per python module, after the check.

    Every mixer instance is counted as a layer built for each slot it calls (or left stock, with why)."""
    from fk_adapters.tasks import SLOTS as CATALOG

    entered: dict[str, list[str]] = {s: [] for s in ops_by_slot}
    decided: dict[tuple[str, str], str] = {}  # (python module, function) -> "" (swapped) or why not
    for _, m in model.named_modules():
        for swap in _calls(m):
            if swap.slot not in ops_by_slot:
                continue
            module = sys.modules[type(m).__module__]
            key = (module.__name__, swap.function)
            if key not in decided:
                own = original(module, swap.function)
                try:
                    ok = agrees(swap, m, swap.adapt(CATALOG[swap.slot].reference, own), own)
                    decided[key] = "" if ok else f"{swap.function} differs from {swap.slot}"
                except Exception as exc:  # noqa: BLE001 - a function the check cannot run stays stock, with why
                    decided[key] = f"check failed: {type(exc).__name__}: {exc}"
                if not decided[key]:
                    new = swap.adapt(ops_by_slot[swap.slot], own)
                    setattr(new, _ORIGINAL_ATTR, own)
                    setattr(module, swap.function, new)
            why = decided[key]
            probe.layer_built((swap.slot,), f"{type(m).__name__}: {why}" if why else None)
            desc = f"{type(m).__name__} ({swap.function})"
            if not why and desc not in entered[swap.slot]:
                entered[swap.slot].append(desc)
    return entered
