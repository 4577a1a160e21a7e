"""Refuse kernels whose declared capabilities do not cover the engine's execution mode."""
from __future__ import annotations

from fk_adapters.kernel import Kernel


class UnsafeKernelError(RuntimeError):
    """A kernel would run in a mode it does not declare itself safe for."""


def refusals(kernels: dict[str, tuple[str, Kernel]], compiled: bool, cuda_graphs: bool) -> list[str]:
    """Why each selected kernel cannot run under (compiled, cuda_graphs); empty when all can."""
    out = []
    for slot, (plugin, k) in kernels.items():
        if compiled and not k.compile_safe:
            out.append(f"{plugin}:{slot} is not declared compile_safe, and the engine compiles the model")
        if cuda_graphs and not k.cuda_graph_safe:
            out.append(f"{plugin}:{slot} is not declared cuda_graph_safe, and the engine captures CUDA graphs")
    return out


def check(kernels: dict[str, tuple[str, Kernel]], compiled: bool, cuda_graphs: bool) -> None:
    why = refusals(kernels, compiled, cuda_graphs)
    if why:
        raise UnsafeKernelError("; ".join(why) + " (run it in eager mode: --mode eager)")
