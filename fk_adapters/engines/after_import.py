"""Run a function once a module is imported (at once if it already is). fk registers the replacement of a class whose
module it must not import itself: importing vLLM's linear-attention layers queries the CUDA device, which initialises
CUDA in the process (vLLM then spawns where stock forks)."""
from __future__ import annotations

import importlib.abc
import sys

_waiting: dict[str, list] = {}


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module someone waits on, it asks the other finders and runs the waiting functions
    right after the module's code."""

    def find_spec(self, name, path, target=None):
        if name not in _waiting:
            return None
        spec = next(filter(None, (f.find_spec(name, path, target) for f in sys.meta_path
                                  if f is not self and hasattr(f, "find_spec"))), None)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        funcs, run = _waiting.pop(name), spec.loader.exec_module

        def exec_module(module):
            run(module)
            for fn in funcs:
                fn(module)

        spec.loader.exec_module = exec_module  # this spec's own loader (path finders make one per module)
        return spec


_FINDER = _Finder()


def when_imported(name: str, fn) -> None:
    """``fn(module)`` once module ``name`` has run its code, in this process."""
    if name in sys.modules:
        fn(sys.modules[name])
        return
    _waiting.setdefault(name, []).append(fn)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def waiting() -> list[str]:
    """The modules not yet imported that functions wait on."""
    return sorted(_waiting)
