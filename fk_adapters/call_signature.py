"""A slot call's signature: what the engine-side op records for each call and a workload file stores.

A signature lists the slot's arguments in interface order: a tensor as
``{"shape", "dtype", "stride"}``, ``None`` as null, the name of a process group fk registered (``fk_adapters.groups``)
as ``{"value": name, "world_size": n}``, anything else as ``{"value": v}``.
"""
from __future__ import annotations

import json


def describe(args) -> list:
    """The signature of one call's positional arguments."""
    import torch

    from fk_adapters import groups

    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append({"shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", ""),
                        "stride": list(a.stride())})
        elif a is None:
            out.append(None)
        elif isinstance(a, str) and (group := groups.find(a)) is not None:
            out.append({"value": a, "world_size": group.world_size})
        else:
            out.append({"value": a})
    return out


def key(sig: list) -> str:
    """The signature as one string: what calls are counted by."""
    return json.dumps(sig, sort_keys=True)
