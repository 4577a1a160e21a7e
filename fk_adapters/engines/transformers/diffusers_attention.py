"""The ``sdpa`` slot in diffusers: its attention registry's native backend, per routed module.

diffusers' attention processors (FLUX, HunyuanVideo-1.5, ...) call ``dispatch_attention_fn``, which looks up the
active backend in ``_AttentionBackendRegistry`` at every call (``native`` unless the user picks another). fk
registers its own function as the native backend (the registry's ``register``, the native's constraints kept): a
call from a module fk routed goes to the slot, every other call to the native function it replaced. A module is
routed only where its class's check agrees (the mapped call over the slot's native against diffusers' native, on
seeded [B, S, H, D] inputs, with and without a key mask) and its processor dispatches to the registry's native; a
forward pre-hook marks the module calling. What the slot cannot express (dropout, the log-sum-exp, context
parallelism, heads that do not group) runs diffusers' native, counted with why. Attention processors that call
``F.scaled_dot_product_attention`` themselves (SDXL's UNet) stay stock and are not counted.
"""
from __future__ import annotations

import weakref

import torch

from fk_adapters import probe
from fk_adapters.engines import calls
from fk_adapters.engines.transformers.attention import SLOT, close, heads_why

_ops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # attention module -> the op its calls go to
_calling: list = []  # the routed module whose forward is running
_native: list = []  # diffusers' own native backend function, once fk's is registered


def _why(query, key, value, dropout_p, return_lse, parallel) -> str:
    if dropout_p > 0:
        return f"dropout {dropout_p}"
    if return_lse:
        return "the log-sum-exp asked for"
    if parallel is not None:
        return "context parallelism"
    return heads_why(query, key, value, 2)


def mapped(op, query, key, value, attn_mask=None, is_causal=False, scale=None):
    """``op`` (the slot's interface) called as diffusers' native backend calls F.sdpa: [B, S, H, D] in and out, a
    [B, Sk] key mask as [B, 1, 1, Sk]."""
    if attn_mask is not None and attn_mask.ndim == 2 and attn_mask.shape == (query.shape[0], key.shape[1]):
        attn_mask = attn_mask[:, None, None, :]
    scale = float(scale) if scale is not None else query.shape[-1] ** -0.5
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))
    return op(q, k, v, attn_mask, bool(is_causal), scale).transpose(1, 2)


def _fk_native(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
               return_lse=False, _parallel_config=None):
    op = _ops.get(_calling[-1]) if _calling else None
    if op is not None:
        why = _why(query, key, value, dropout_p, return_lse, _parallel_config)
        if not why:
            return mapped(op, query, key, value, attn_mask, is_causal, scale)
        calls.left_stock(SLOT, f"{type(_calling[-1]).__name__}: {why}")
    return _native[0](query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                      enable_gqa=enable_gqa, return_lse=return_lse, _parallel_config=_parallel_config)


def _register():
    """fk's function as the registry's native backend (once a process); the registry class."""
    from diffusers.models.attention_dispatch import AttentionBackendName, _AttentionBackendRegistry as registry

    native = AttentionBackendName.NATIVE
    if not _native:
        _native.append(registry._backends[native])
        registry.register(native, constraints=list(registry._constraints[native]),
                          supports_context_parallel=native.value in registry._supports_context_parallel)(_fk_native)
    return registry


def _dispatches(m) -> bool:
    """Does ``m``'s processor call ``dispatch_attention_fn``?"""
    processor = getattr(m, "processor", None)
    code = getattr(type(processor).__call__, "__code__", None) if processor is not None else None
    return code is not None and "dispatch_attention_fn" in code.co_names


def agrees(m) -> bool:
    """Does the mapped call over the slot's native give what diffusers' native gives, for ``m``'s dtype and head
    size, without a mask and with a [B, Sk] and a [B, 1, Sq, Sk] boolean mask?"""
    from fk_adapters.engines.transformers.natives import NATIVES

    p = next(m.parameters())
    heads = int(getattr(m, "heads", 2) or 2)
    d = int(getattr(m, "inner_dim", 0) or 16 * heads) // heads
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, heads, d, generator=gen).to(p.device, p.dtype) for _ in range(3))
    keys = torch.arange(5)[None, :] < torch.tensor([5, 3])[:, None]
    for mask in (None, keys, keys[:, None, None, :].expand(2, 1, 5, 5)):
        mask = mask if mask is None else mask.to(p.device)
        with torch.inference_mode():
            want = _native[0](q, k, v, attn_mask=mask)
            got = mapped(NATIVES[SLOT], q, k, v, mask)
        if not close(got, want):
            return False
    return True


def _enter(module, args) -> None:
    _calling.append(module)


def _leave(module, args, out) -> None:  # returns None: the module's output stays its own
    _calling.pop()


def _mark(m) -> None:
    m.register_forward_pre_hook(_enter)
    m.register_forward_hook(_leave, always_call=True)


def route(model, op) -> list[str]:
    """Route every attention module of ``model`` whose processor dispatches to diffusers' registry into ``op``
    (after its class's check); count each as a layer built or left stock. Returns the classes entered."""
    modules = [m for m in model.modules() if _dispatches(m)]
    if not modules:
        return []
    registry = _register()
    decided: dict[type, str] = {}
    entered: list[str] = []
    for m in modules:
        cls = type(m)
        backend = getattr(m.processor, "_attention_backend", None)
        if cls not in decided:
            try:
                decided[cls] = "" if agrees(m) else "the mapped call differs from diffusers' native attention"
            except Exception as exc:  # noqa: BLE001 - a class the check cannot run stays stock, with why
                decided[cls] = f"check failed: {type(exc).__name__}: {exc}"
        picked = backend or registry._active_backend
        active = getattr(picked, "value", picked)
        why = decided[cls] or ("" if active == "native" else f"attention backend '{active}'")
        probe.layer_built((SLOT,), f"{cls.__name__}: {why}" if why else None)
        if why:
            continue
        _ops[m] = op
        _mark(m)
        if cls.__name__ not in entered:
            entered.append(cls.__name__)
    return entered
