"""The engine's compiled baseline for ``fk check``: a slot's native forward as the engine's compiled mode runs it.

An engine module (``ENGINES``) says, per slot, whether its compiled mode runs the slot's native torch forward
through Inductor (``Plan.compiles``) and builds that forward from the engine's own code (``Native``). Here: the
compile itself, and the guard that the compiled baseline really is a compiled graph and not the engine's kernel.
"""
from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

MODES = ("eager", "compiled")
ENGINES = {"vllm": "fk_adapters.check.compiled_vllm"}  # engines with a compiled mode fk check can reproduce
NO_COMPILE = {"sglang": "SGLang's default serving runs no torch.compile (--enable-torch-compile is off): its "
                        "kernels run as they are"}
TORCH_NAMESPACES = ("aten", "prims", "_inductor")  # what Inductor generates code for; any other op is opaque
RECOMPILE_LIMIT = 64  # graphs per compiled forward (shapes, strides): a workload's signatures of one slot


def default_mode(engine: str, device: str) -> str:
    """``fk run``'s default: compiled on CUDA for an engine with a compiled mode, else eager."""
    return "compiled" if engine in ENGINES and device == "cuda" else "eager"


def engine_module(engine: str):
    """The engine's compiled-baseline module, or None for an engine without one."""
    return importlib.import_module(ENGINES[engine]) if engine in ENGINES else None


@dataclass
class Plan:
    """Whether a slot runs its native forward under the engine's compiled mode: ``includes`` what the compiled
    baseline computes, else ``why`` the compiled mode runs the engine's kernel (the compiled baseline is the eager
    one)."""
    compiles: bool
    includes: str = ""
    why: str = ""
    settings: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v or k == "compiles"}


def no_compile_plan(engine: str) -> Plan:
    return Plan(False, why=NO_COMPILE.get(engine, f"fk check knows no compiled mode of {engine}"))


@dataclass
class Native:
    """A slot's native forward from the engine's code, compiled: ``fn(*slot_args)`` returns the slot's results
    (its result, or its mutated tensors in order); ``source`` the engine function it compiles."""
    fn: Callable
    source: str
    graphs: list = field(default_factory=list)

    def graph_ops(self) -> int:
        return sum(1 for g in self.graphs for n in g.graph.nodes if n.op in ("call_function", "call_method"))


def qualified(fn) -> str:
    fn = getattr(fn, "__func__", fn)
    return f"{fn.__module__}.{fn.__qualname__}"


def compile_native(fn, options: dict | None = None, context=contextlib.nullcontext):
    """``torch.compile(fn)`` with Inductor, whole-graph, recording the FX graphs Dynamo hands it.

    Returns (compiled callable entering ``context()`` on each call, the list the graphs go to)."""
    import torch
    from torch._inductor.compile_fx import compile_fx

    graphs: list = []

    def inductor(gm, example_inputs):
        graphs.append(gm)
        return compile_fx(gm, example_inputs, config_patches=dict(options or {}))

    compiled = torch.compile(fn, backend=inductor, fullgraph=True, dynamic=False)

    def call(*args):
        with context():
            return compiled(*args)

    return call, graphs


def first_call(native: Native, args: tuple) -> None:
    """Call ``native`` on new arguments (a compile where no graph fits them yet). Past its recompile limit Dynamo
    would run the forward eagerly, unseen: here it raises instead (the calls timed after reuse this graph)."""
    import torch

    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True):
        native.fn(*args)


def mark_tokens_dynamic(args: tuple, positions: tuple[int, ...]) -> None:
    """Dim 0 (the token count) of these arguments symbolic in the next compile, as vLLM marks ``num_tokens``
    (a size Dynamo specializes, e.g. 1, stays static)."""
    import torch

    for i in positions:
        if isinstance(args[i], torch.Tensor) and args[i].dim():
            torch._dynamo.maybe_mark_dynamic(args[i], 0)


def fallback_problems(native: Native) -> list[str]:
    """Why ``native`` is not a compiled graph of torch ops: no graph reached Inductor (it ran eagerly), a graph
    does nothing, or a graph calls an opaque operator (an engine kernel Inductor can only call, not compile)."""
    import torch

    if not native.graphs:
        return [f"{native.source}: no graph reached Inductor (it ran eagerly)"]
    problems = []
    for g in native.graphs:
        calls = [n for n in g.graph.nodes if n.op in ("call_function", "call_method")]
        if not calls:
            problems.append(f"{native.source}: a compiled graph with no operation")
        for n in calls:
            target = n.target
            if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                space = target.namespace if isinstance(target, torch._ops.OpOverload) else target._qualified_op_name
                space = space.split("::")[0]
                if space not in TORCH_NAMESPACES:
                    problems.append(f"{native.source}: its graph calls the opaque operator {target} (an engine "
                                    "kernel, not a compiled native forward)")
    return list(dict.fromkeys(problems))
