"""What the scenarios rule out for the selected kernels without an engine: a dtype none of them declares. Said before
any engine starts, so a mistake costs no run and never reads as a failing kernel. (Whether each callable can take
its slot's arguments is checked when its plugin loads: ``Kernel.validate``.)"""
from __future__ import annotations

from fk_adapters.kernel import Kernel


def dtype_problems(chosen: dict[str, tuple[str, Kernel]], scenarios) -> list[str]:
    """One line per scenario whose dtype none of the chosen kernels declares: no kernel of the candidate could run."""
    if not chosen:
        return []
    offered = sorted({d for _, k in chosen.values() for d in k.dtypes})
    return [f"scenario {sc.name} runs in {sc.dtype}, which no selected kernel supports "
            f"(they offer {', '.join(offered)})" for sc in scenarios if sc.dtype not in offered]
