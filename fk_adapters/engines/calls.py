"""Engine drift guard: route a call to a plugin only when the adapter knows every argument in it.

``Params`` are the parameters an adapter was written for (its routed function's own signature).
``unknown`` names what in a call lies outside them ("" when nothing does): such a call must run the
engine's own path with every argument it was given, counted by ``left_stock``. ``drift`` compares an
in-tree method's signature with them once, at install.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from fk_adapters import probe

_NAMED = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True)
class Params:
    names: tuple[str, ...]
    required: int  # how many leading names have no default

    @classmethod
    def of(cls, fn, skip: int) -> Params:
        """The named parameters of ``fn`` after its first ``skip`` (``*args`` and ``**kwargs`` left out)."""
        ps = [p for p in inspect.signature(fn).parameters.values() if p.kind in _NAMED][skip:]
        return cls(tuple(p.name for p in ps), sum(p.default is p.empty for p in ps))


def _quoted(names) -> str:
    return ", ".join(f"'{n}'" for n in names)


def unknown(params: Params, args: tuple, kwargs: dict) -> str:
    """Why the call ``(*args, **kwargs)`` is not one ``params`` describe, or "" when it is.

    Plain Python over the call's shape only (no tensor values): Dynamo folds it while tracing."""
    names = params.names
    if len(args) > len(names):
        return f"{len(args)} positional arguments, knows {len(names)} ({', '.join(names)})"
    if not kwargs and len(args) >= params.required:  # the common call: known positionals only
        return ""
    extra = sorted(k for k in kwargs if k not in names)
    if extra:
        return ("unknown arguments " if len(extra) > 1 else "unknown argument ") + _quoted(extra)
    twice = [n for n in names[:len(args)] if n in kwargs]
    if twice:
        return "argument given twice: " + _quoted(twice)
    missing = [n for n in names[len(args):params.required] if n not in kwargs]
    if missing:
        return "missing argument " + _quoted(missing)
    return ""


def _left_stock_traced(slot: str, why: str) -> None:
    probe.call_left_stock(slot, why, traced=True)


# Dynamo runs this once while tracing and bakes its (None) result in: the count is a trace-time record.
_left_stock_traced = torch._dynamo.assume_constant_result(_left_stock_traced)


def _native_path_traced(key: str) -> None:
    probe.on_native_path(key)


_native_path_traced = torch._dynamo.assume_constant_result(_native_path_traced)


def on_native_path(key: str) -> None:
    """Count a call of op ``key`` (an engine-own kernel) left on the engine's own path of a compiled build: once per
    trace under torch.compile, per call outside it."""
    if torch.compiler.is_compiling():
        _native_path_traced(key)
    else:
        probe.on_native_path(key)


def left_stock(slot: str, why: str) -> None:
    """Count a call of ``slot`` left on the engine's own path: per call in eager mode, once per trace when
    torch.compile traces it (a Python side effect in traced code would break the trace)."""
    if torch.compiler.is_compiling():
        _left_stock_traced(slot, why)
    else:
        probe.call_left_stock(slot, why)


def _in_tree(cls, method: str) -> list[inspect.Parameter] | None:
    """The parameters of ``cls.method`` after ``self`` (all of them for a module's function; None where it has none
    of its own or cannot be read)."""
    raw = inspect.getattr_static(cls, method, None)
    if raw is None:
        return None
    try:
        ps = list(inspect.signature(getattr(cls, method)).parameters.values())
    except (TypeError, ValueError):
        return None
    if not isinstance(raw, (staticmethod, classmethod)) and not inspect.ismodule(cls):
        ps = ps[1:]
    return ps if any(p.kind in _NAMED for p in ps) else None  # only *args/**kwargs: a dispatcher, no interface


def drift(params: Params, cls, methods: tuple[str, ...]) -> tuple[str, str]:
    """(why no call of ``cls`` can be trusted to the adapter, ""; a note on in-tree parameters it does not know, "").

    The in-tree methods' named parameters must begin with ``params.names`` in order (an older engine may
    lack trailing ones); parameters they add after those must be optional: calls passing them stay stock."""
    breaks, gained = [], []
    for m in methods:
        ps = _in_tree(cls, m)
        if ps is None:
            continue
        tree = [p.name for p in ps if p.kind in _NAMED]
        n = min(len(tree), len(params.names))
        required = [p.name for p in ps if p.name not in params.names and p.default is p.empty
                    and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        label = f"{cls.__name__}.{m}"
        if tree[:n] != list(params.names[:n]):
            breaks.append(f"in-tree {label}({', '.join(tree)}) is not the ({', '.join(params.names)}) "
                          "fk was written for")
        elif required:
            breaks.append(f"in-tree {label} requires {_quoted(required)}, unknown to fk")
        else:
            gained += [p.name for p in ps if p.name not in params.names and p.name not in gained
                       and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    note = f"in-tree {cls.__name__} also takes {_quoted(gained)}: calls passing it stay stock" if gained else ""
    return "; ".join(breaks), note
