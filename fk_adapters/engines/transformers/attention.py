"""The ``sdpa`` slot in transformers: an attention function in its sanctioned registry, the model switched to it.

transformers' attention modules call ``ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation)`` at
forward time. fk registers ``fk_sdpa`` there (``AttentionInterface.register``) and in the mask registry with sdpa's
own mask builder (so the masks are sdpa's), checks that the function with the slot's native gives what
``sdpa_attention_forward`` gives for each attention class, then points each config whose implementation is
``"sdpa"`` at it. The function maps one call onto the slot as ``sdpa_attention_forward`` maps it onto
``F.scaled_dot_product_attention`` (is_causal only without a mask and for more than one query, keys cropped to the
queries then); what the slot cannot express (dropout, output_attentions, a position bias, a cache handed to the
function, head sizes that differ) runs ``sdpa_attention_forward`` itself, counted with why.

A class whose forward compares a name with ``"sdpa"`` would take another path under fk's name: its model stays stock.
One that looks ``"sdpa"`` up by name (SAM's fallback from flash attention) is routed: fk's guard on that entry counts
such calls from a routed module as left stock, and every call reaches transformers' own function.
"""
from __future__ import annotations

import ast
import inspect
import math
import textwrap
import weakref

import torch

from fk_adapters import probe
from fk_adapters.engines import calls

KEY = "fk_sdpa"
SLOT = "sdpa"
AGREE = {torch.float32: (1e-5, 1e-4), torch.float16: (1e-3, 1e-2), torch.bfloat16: (1e-2, 2e-2)}
_ops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # attention module -> the op its calls go to


def _why(op, query, key, value, dropout, position_bias, cache, kwargs) -> str:
    if op is None:
        return "a module fk did not route (built after install)"
    if dropout > 0:
        return f"dropout {dropout}"
    if kwargs.get("output_attentions"):
        return "output_attentions"
    if position_bias is not None:
        return "a position bias"
    if cache is not None:
        return "a cache handed to the attention function (continuous batching)"
    return heads_why(query, key, value, 1)


def heads_why(query, key, value, heads_dim: int) -> str:
    """What the slot cannot express in these tensors' head sizes and counts (heads along ``heads_dim``), or ""."""
    if not query.shape[-1] == key.shape[-1] == value.shape[-1]:
        return "value head size unlike the query's"
    if query.shape[heads_dim] % key.shape[heads_dim]:
        return f"{query.shape[heads_dim]} query heads over {key.shape[heads_dim]} kv heads"
    return ""


def close(got, want) -> bool:
    """Do a mapped call's output and the stock one agree, in shape and within ``AGREE`` for their dtype?"""
    atol, rtol = AGREE.get(want.dtype, AGREE[torch.float32])
    return got.shape == want.shape and torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol)


def mapped(op):
    """An attention function in ``sdpa_attention_forward``'s interface that calls ``op`` (the slot's interface)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def fk_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                position_bias=None, cache=None, **kwargs):
        fn = _ops.get(module) if op is None else op
        why = _why(fn, query, key, value, dropout, position_bias, cache, kwargs)
        if why:
            calls.left_stock(SLOT, f"{type(module).__name__}: {why}")
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                          scaling=scaling, is_causal=is_causal, position_bias=position_bias,
                                          cache=cache, **kwargs)
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
        causal = bool(query.shape[2] > 1 and attention_mask is None and causal)
        if causal and key.shape[2] > query.shape[2]:
            key, value = key[:, :, :query.shape[2]], value[:, :, :query.shape[2]]
        scale = float(scaling) if scaling is not None else 1.0 / math.sqrt(query.shape[-1])
        return fn(query, key, value, attention_mask, causal, scale).transpose(1, 2).contiguous(), None

    return fk_sdpa


def _guard_lookups() -> None:
    """Wrap the registry's ``"sdpa"`` entry: a routed module's call through it runs stock sdpa, counted."""
    from transformers import AttentionInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    stock = ALL_ATTENTION_FUNCTIONS["sdpa"]
    if getattr(stock, "fk_guard", False):
        return

    def sdpa_by_name(module, *args, **kwargs):
        if module in _ops:
            calls.left_stock(SLOT, f"{type(module).__name__}: sdpa looked up by its name")
        return stock(module, *args, **kwargs)

    sdpa_by_name.fk_guard = True
    AttentionInterface.register("sdpa", sdpa_by_name)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    _guard_lookups()

    AttentionInterface.register(KEY, mapped(None))
    AttentionMaskInterface.register(KEY, sdpa_mask)


def _uses_interface(m) -> bool:
    """Does ``m``'s class forward pick its attention function from the registry?"""
    forward = getattr(type(m), "forward", None)
    code = getattr(inspect.unwrap(forward), "__code__", None) if callable(forward) else None
    return code is not None and "ALL_ATTENTION_FUNCTIONS" in code.co_names


def _compares_sdpa(forward) -> bool:
    """Does ``forward`` compare anything with "sdpa"? Read from its source; where that cannot be read, any "sdpa"
    constant counts."""
    code = getattr(forward, "__code__", None)
    if code is None or "sdpa" not in code.co_consts:
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(forward)))
    except (OSError, TypeError, SyntaxError):
        return True
    return any(isinstance(c, ast.Constant) and c.value == "sdpa"
               for n in ast.walk(tree) if isinstance(n, ast.Compare) for c in ast.walk(n))


def _names_sdpa(model) -> str:
    """The class of ``model`` whose forward tests the implementation's name "sdpa" (its path would change), or ""."""
    for cls in dict.fromkeys(type(m) for m in model.modules()):
        forward = getattr(cls, "forward", None)
        if callable(forward) and _compares_sdpa(inspect.unwrap(forward)):
            return cls.__name__
    return ""


def _check_args(m, causal: bool, mask: str):
    """Seeded q [2, Hq, 5, D], k / v [2, Hkv, 5, D] in the module's dtype, the mask kind asked for."""
    p = next(m.parameters())
    group = int(getattr(m, "num_key_value_groups", 1) or 1)
    d = int(getattr(m, "head_dim", 0) or 16)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 5, d, generator=gen).to(p.device, p.dtype) for h in (2 * group, 2, 2))
    attn = None
    if mask == "bool":
        attn = (torch.arange(5)[None, :] < torch.tensor([5, 3])[:, None])[:, None, None, :].expand(2, 1, 5, 5)
    elif mask == "additive":
        attn = torch.where(torch.rand(2, 1, 5, 5, generator=gen) > 0.2, 0.0, torch.finfo(p.dtype).min)
    attn = attn if attn is None else attn.to(p.device, attn.dtype if attn.dtype == torch.bool else p.dtype)
    return (m, q, k, v, attn), {"is_causal": causal}


def agrees(m, native) -> bool:
    """Does the mapped function over ``native`` give what ``sdpa_attention_forward`` gives for module ``m``?"""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    fn = mapped(native)
    for causal in (None, True, False):
        for mask in ("none", "bool", "additive"):
            args, kwargs = _check_args(m, causal, mask)
            with torch.inference_mode():
                want, got = sdpa_attention_forward(*args, **kwargs)[0], fn(*args, **kwargs)[0]
            if not close(got, want):
                return False
    return True


def _sdpa_modules(model):
    """(module, its config) for each attention module of ``model`` that picks its function from the registry."""
    for _, m in model.named_modules():
        cfg = getattr(m, "config", None)
        if _uses_interface(m) and cfg is not None:
            yield m, cfg


def route(model, op) -> list[str]:
    """Point every sdpa attention module of ``model`` at ``op`` (after the per-class check) and switch its config to
    ``fk_sdpa``; count each module as a layer built or left stock. Returns the classes entered."""
    from fk_adapters.engines.transformers.natives import NATIVES

    _register()
    named = _names_sdpa(model)
    decided: dict[type, str] = {}
    entered: list[str] = []
    for m, cfg in _sdpa_modules(model):
        impl = cfg._attn_implementation
        cls = type(m)
        if impl not in ("sdpa", KEY):
            probe.layer_built((SLOT,), f"{cls.__name__}: attention implementation '{impl}'")
            continue
        if cls not in decided:
            try:
                decided[cls] = "" if agrees(m, NATIVES[SLOT]) else "the mapped call differs from sdpa_attention_forward"
            except Exception as exc:  # noqa: BLE001 - a class the check cannot run stays stock, with why
                decided[cls] = f"check failed: {type(exc).__name__}: {exc}"
        why = f"{named} tests the implementation's name 'sdpa'" if named else decided[cls]
        probe.layer_built((SLOT,), f"{cls.__name__}: {why}" if why else None)
        if why:
            continue
        _ops[m] = op
        cfg._attn_implementation_internal = KEY
        if cls.__name__ not in entered:
            entered.append(cls.__name__)
    return entered
