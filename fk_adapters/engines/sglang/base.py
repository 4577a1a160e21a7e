"""What every SGLang entry is made of: the hooked ``Target``, an adapter's ``Stock`` answer, and the ``Runtime``
state adapters consult per call. Pure Python: nothing here imports sglang."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fk_adapters.engines import calls, loading

NOT_SELECTED = ""  # Stock reason: no kernel chosen for this slot (not counted)


@dataclass(frozen=True)
class Stock:
    """The adapter declines this call: run SGLang's original, record ``why`` (if any) for ``slot``."""

    slot: str
    why: str = NOT_SELECTED


def own_path(slot: str) -> Stock | None:
    """SGLang's original for this call, counted, where ``slot``'s chosen kernel is the engine's own (the passthrough):
    None otherwise. Seams whose slot cannot hand the engine's kernel what stock's call does (attention's tuning, an
    out-of-place all-reduce, the GDN decode's packed kernel) leave the engine's own kernel where stock runs it."""
    if own := loading.own_key(slot):
        calls.on_native_path(own)
        return Stock(slot)
    return None


@dataclass(frozen=True)
class Target:
    cls: str  # dotted path of the class whose method is hooked (of the module, for a module function)
    slots: tuple[str, ...]
    adapter: Callable  # adapter(ops, self, <the call's arguments it knows>) -> SGLang's result | Stock
    layer_check: Callable = lambda layer: ""  # why a built layer can never route ("" if it can)
    method: str = "forward_cuda"
    slot_of: Callable | None = None  # slot_of(args, kwargs): the slot a call is for, where there are several
    init_cls: str = ""  # the class whose __init__ counts built layers, where not ``cls`` (a method's layer)
    built: Callable | None = None  # built(layer) -> why a built layer never routes; default: layer_reason
    counts_layers: bool = True  # False: another target of the same slot counts its layers
    bound: bool = True  # False: a module function, whose call has no ``self`` before its arguments

    @property
    def params(self) -> calls.Params:
        """The call arguments the adapter knows (after ``ops`` and, for a method, the layer)."""
        return calls.Params.of(self.adapter, skip=2 if self.bound else 1)

    def slot(self, args: tuple, kwargs: dict) -> str:
        return self.slot_of(args, kwargs) if self.slot_of else self.slots[0]

    @property
    def path(self) -> str:
        return f"{self.cls}.{self.method}"

    @property
    def init_path(self) -> str:
        return f"{self.init_cls or self.cls}.__init__"


class Runtime:
    """Engine state the adapters consult per call; ``install`` points these at SGLang's."""

    batch_invariant: Callable[[], bool] = staticmethod(lambda: False)
    linear_backend_why: Callable[[], str] = staticmethod(lambda: "")  # a non-default GEMM backend (aiter, cutedsl)
    lm_head_why: Callable[[], str] = staticmethod(lambda: "")  # a server arg that changes the head's GEMM
    combine: Callable = staticmethod(lambda hidden_states: (hidden_states,))  # SGLang's StandardCombineInput
    kv_write_loc: Callable = staticmethod(lambda loc, swa_loc: loc)  # SGLang's KVWriteLoc
    attention_backend_why: Callable[[], str] = staticmethod(lambda: "")  # no half of the server on fa3
    mamba_track_why: Callable[[], str] = staticmethod(lambda: "")  # a radix-cache tracking step (chunk states kept)
    gdn_backend_why: Callable[[str], str] = staticmethod(lambda phase: "")  # GDN "decode"/"prefill" not on Triton
    ssm_rounding_why: Callable[[], str] = staticmethod(lambda: "")  # stochastic rounding of the SSM cache
