"""A workload's signatures checked against their slot, and fresh inputs built from one.

The format (``describe``, ``key``) is ``fk_adapters.call_signature``'s: the engine records it, fk check reads it.
"""
from __future__ import annotations

import math

from fk_adapters import groups
from fk_adapters.check import scales

_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool")
MATRICES = ("w13", "w2")  # weight stacks, drawn at a trained layer's scale like a 2-D ``weight``


def validate(slot, sig: list) -> None:
    """ValueError unless ``sig`` fits ``slot``'s interface."""
    names = slot.param_names()
    if len(sig) != len(names):
        raise ValueError(f"{slot.name}: signature has {len(sig)} arguments, the slot {len(names)}")
    for name, a in zip(names, sig):
        if isinstance(a, dict) and "shape" in a:
            if a.get("dtype") not in _DTYPES or len(a.get("stride", [])) != len(a["shape"]):
                raise ValueError(f"{slot.name}.{name}: bad tensor description {a}")


def _storage_size(shape, stride) -> int:
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(shape, stride))


def _values(name: str, shape, dtype, gen, sig_by_name, device, draw: dict):
    """Random contents for one argument, made on ``device``: never zeros, in the range the slot expects,
    activations at ``draw["scale"]`` (``fk_adapters.check.scales``)."""
    import torch

    stats = (draw.get("stats") or {}).get(name)
    if name == "positions":
        rows = sig_by_name["cos_sin_cache"]["shape"][0]
        return torch.randint(0, rows, tuple(shape), generator=gen, dtype=torch.int64, device=device).to(dtype)
    if name == "cos_sin_cache":
        rows, width = shape
        ang = torch.rand((rows, width // 2), generator=gen, dtype=torch.float64, device=device) * 2 * math.pi
        return torch.cat([ang.cos(), ang.sin()], dim=-1).to(dtype)
    if name in MATRICES or (name == "weight" and len(shape) > 1):
        return scales.matrix(shape, gen, device, stats).to(dtype)
    if name == "weight":
        return scales.weight(shape, gen, device, stats).to(dtype)
    if name == "topk_ids":
        return scales.expert_ids(shape, sig_by_name["w13"]["shape"][0], gen, device).to(dtype)
    if name == "topk_weights":
        return scales.router_weights(shape, gen, device).to(dtype)
    if name in ("block_table", "seq_lens", "query_start_loc"):  # drawn together, consistent with each other
        if "attention" not in draw:
            draw["attention"] = scales.attention_metadata(sig_by_name, gen, device)
        return draw["attention"][name].to(dtype)
    if name in ("state_indices", "cu_seqlens", "has_initial_state"):  # drawn together, like the attention metadata
        if "recurrent" not in draw:
            draw["recurrent"] = scales.recurrent_metadata(sig_by_name, gen, device)
        return draw["recurrent"][name].to(dtype)
    if name in ("g", "beta", "A", "dt_bias"):
        return scales.recurrent_gate(name, shape, gen, device).to(dtype)
    if name == "D":
        return scales.weight(shape, gen, device, stats).to(dtype)
    return scales.activation(shape, dtype, draw["scale"], gen, device, stats, draw["growth"], draw["row"]).to(dtype)


def make_inputs(slot, sig: list, device: str, seed: int, poison: bool = True, scale: str = "normal",
                stats: dict | None = None) -> tuple:
    """Fresh random arguments with the signature's shapes, dtypes and strides, activations at ``scale``
    (``fk_adapters.check.scales``; ``stats``: the signature's recorded ``value_stats``, if any).

    The values are generated on ``device`` with a generator there seeded by ``seed``, so
    they are deterministic per (device, seed) and large inputs cost no host work.

    A strided tensor is a view into a larger buffer whose gaps hold NaN (``poison``), so a
    kernel that reads outside the view shows it.
    """
    import torch

    names = slot.param_names()
    sig = scales.pool_slots_used(names, scales.cache_blocks_used(names, sig))
    by_name = dict(zip(names, sig))
    gen = torch.Generator(device=device).manual_seed(seed)
    draw = {"scale": scale, "stats": stats, "growth": slot.growth, "row": seed}
    out = []
    for name, a in zip(names, sig):
        if a is None:
            out.append(None)
        elif "world_size" in a:  # a process group: this process plays every rank, each holding its own first argument
            x = out[0]
            peers = [_values(names[0], list(x.shape), x.dtype, gen, by_name, device, draw).to(x.dtype)
                     for _ in range(a["world_size"] - 1)]
            out.append(groups.world([x, *peers]))
        elif "shape" not in a:
            out.append(a["value"])
        else:
            dtype = getattr(torch, a["dtype"])
            vals = _values(name, a["shape"], dtype, gen, by_name, device, draw)
            storage = torch.empty(_storage_size(a["shape"], a["stride"]), dtype=dtype, device=device)
            if poison and dtype.is_floating_point:
                storage.fill_(float("nan"))
            t = storage.as_strided(a["shape"], a["stride"])
            t.copy_(vals)
            out.append(t)
    return tuple(out)
