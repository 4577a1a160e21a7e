"""What can be known about the selected kernels without an engine: whether each callable can take its slot's
arguments, and whether the scenarios' dtypes are among those the kernels declare. Said before any engine starts, so a
mistake costs no run and never reads as a failing kernel."""
from __future__ import annotations

import inspect

from fk_adapters.kernel import Kernel


def _unbindable(target, n_args: int) -> str:
    """Why ``target`` cannot be called with ``n_args`` positional arguments ('' if it can, or cannot be read)."""
    if not callable(target):
        return f"{type(target).__name__} is not callable"
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):  # a builtin or an extension's function: nothing to read
        return ""
    try:
        sig.bind(*range(n_args))
    except TypeError as exc:
        return f"{sig}: {exc}"
    return ""


def signature_problems(chosen: dict[str, tuple[str, Kernel]]) -> list[str]:
    """One line per kernel whose ``fn`` cannot take its slot's arguments (as the engine passes them: positionally),
    or whose ``factory`` cannot take the engine's own kernel."""
    from fk_adapters.tasks import SLOTS

    out = []
    for slot, (plugin, k) in chosen.items():
        interface = SLOTS[slot].signature.split(" ->")[0]
        if k.fn is not None:
            why = _unbindable(k.fn, len(SLOTS[slot].param_names()))
            what = f"fn {k.label} cannot be called as {interface}"
        else:
            why = _unbindable(k.factory, 1)
            what = f"factory {k.label} cannot take the engine's own kernel (one argument)"
        if why:
            out.append(f"{plugin}:{slot}: {what} ({why})")
    return out


def dtype_problems(chosen: dict[str, tuple[str, Kernel]], scenarios) -> list[str]:
    """One line per scenario whose dtype none of the chosen kernels declares: no kernel of the candidate could run."""
    if not chosen:
        return []
    offered = sorted({d for _, k in chosen.values() for d in k.dtypes})
    return [f"scenario {sc.name} runs in {sc.dtype}, which no selected kernel supports "
            f"(they offer {', '.join(offered)})" for sc in scenarios if sc.dtype not in offered]
