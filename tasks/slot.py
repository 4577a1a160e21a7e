"""The shape of a catalog entry: one slot, its interface and its reference semantics."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

# where a slot the transformers host routes module by module enters SGLang besides its LLM runtime (a not_entered note)
SGLANG_DIFFUSERS_FALLBACK = ("in SGLang's diffusion runtime (sglang.multimodal_gen) it enters the diffusers fallback's "
                             "denoiser (SDXL's UNet, HunyuanVideo-1.5) by the transformers host's module routing, in "
                             "its diffusion workers only (fk_adapters/engines/sglang/diffusion_fallback.py)")


@dataclass(frozen=True)
class Slot:
    """A place in an engine where a kernel can be swapped in.

    ``signature`` is the exact call interface every kernel for this slot implements;
    ``mutates`` names the arguments it writes in place (empty: it returns a new tensor).
    ``schema`` is the same interface as a torch operator schema (how the adapters register
    a kernel as an opaque torch custom op) and ``fake`` computes a result's shape only.
    ``reference`` is the plain-PyTorch semantics; ``traffic`` the least memory traffic of one call;
    ``flops`` the floating-point operations of one call (None: a memory-bound slot, reported by traffic only);
    ``make_inputs(case, dtype, device, gen)`` builds the positional arguments for one case of ``cases``.
    ``entries`` says, per engine, where the slot enters it; ``not_entered``, per engine it does not enter, why.
    """

    name: str
    summary: str
    signature: str
    reference: Callable
    make_inputs: Callable
    cases: tuple[dict, ...]
    schema: str = ""
    fake: Callable | None = None
    mutates: tuple[str, ...] = ()
    dtype_arg: int = 0
    entries: dict[str, tuple[str, ...]] = field(default_factory=dict)
    not_entered: dict[str, str] = field(default_factory=dict)
    traffic: Callable | None = None  # traffic(*args) -> bytes a kernel must read plus write, at least
    flops: Callable | None = None  # flops(*args) -> floating-point operations of one call (a multiply-add: 2)
    growth: int = 1  # a result's magnitude grows as this power of its activations' (fk check's large scale)
    untimed: str = ""  # why fk check judges this slot's results but times no call of it ("": it times them)

    @property
    def in_place(self) -> bool:
        return bool(self.mutates)

    def run_reference(self, args: tuple):
        """Apply the reference to copies of ``args``; return what the slot's result is.

        For an in-place slot the result is the tuple of mutated tensors (None skipped).
        """
        import torch

        from fk_adapters import groups

        copies = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        out = groups.run_as_every_rank(self.reference, copies)  # a collective's: every rank of an in-process world
        if not self.in_place:
            return (out,)
        return tuple(copies[i] for i in self.mutated_positions() if copies[i] is not None)

    def param_names(self) -> list[str]:
        return re.findall(r"[(,]\s*(\w+)\s*:", self.signature.split("->")[0])

    def mutated_positions(self) -> tuple[int, ...]:
        params = self.param_names()
        return tuple(params.index(m) for m in self.mutates)


def nbytes(t) -> int:
    """Bytes of a tensor's elements (0 for None)."""
    return 0 if t is None else t.numel() * t.element_size()


def acc(t):
    """``t`` in the references' accumulation precision: float32, or float64 when it already is."""
    import torch

    return t.to(torch.promote_types(t.dtype, torch.float32))

