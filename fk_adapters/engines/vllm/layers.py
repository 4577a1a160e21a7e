"""Out-of-tree replacements for vLLM's CustomOp layers, one per in-tree class.

Each replacement subclasses the in-tree class (vLLM's ``CustomOp.register_oot`` requires
it) and overrides ``forward`` so the plugin kernel runs in every mode, eager or compiled.
A call routes only when its arguments are exactly those the slot's ``routed`` function takes;
any other call (an argument a newer vLLM added, an extra positional) runs the in-tree
``forward`` with every argument and is counted by ``calls.left_stock`` (per call in eager
mode, once per trace when Dynamo traces ``forward``). Kernel calls are counted inside the op.
"""
from __future__ import annotations

from fk_adapters import probe
from fk_adapters.engines import calls

# the in-tree methods a replacement stands for (CustomOp dispatches to one of them)
IN_TREE_METHODS = ("forward_native", "forward_cuda", "forward_cpu")


def _replacement(base, slots: tuple[str, ...], routed, slot_of=None, layer_check=lambda layer: ""):
    """A subclass of ``base`` whose ``forward`` is ``routed(self, ...)`` for every call that fits it.

    ``slot_of(args, kwargs)``: the slot a call is for (where ``base`` hosts several); ``layer_check(layer)``:
    why a built layer can never route ("" if it can). ``_fk_drift`` (set by install): why no layer can.
    """
    params = calls.Params.of(routed, skip=1)
    pick = slot_of or (lambda args, kwargs: slots[0])

    class FkLayer(base):
        _fk_params = params
        _fk_drift = ""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            why = self._fk_drift or layer_check(self)
            self._fk_routed = not why
            probe.layer_built(slots, why or None)

        def forward(self, *args, **kwargs):
            if not self._fk_routed:
                return super().forward(*args, **kwargs)
            why = calls.unknown(params, args, kwargs)
            if why:
                slot = pick(args, kwargs)
                if slot in slots:
                    calls.left_stock(slot, why)
                return super().forward(*args, **kwargs)
            return routed(self, *args, **kwargs)

    return FkLayer


def rms_norm_class(base, ops: dict):
    """RMSNorm: 'rms_norm' without residual, 'fused_add_rms_norm' with it."""
    plain, fused = ops.get("rms_norm"), ops.get("fused_add_rms_norm")
    slots = tuple(s for s in ("rms_norm", "fused_add_rms_norm") if s in ops)

    def routed(self, x, residual=None):
        if residual is None:
            if plain is None:
                return self._forward_method(x, residual)
            return plain(x, self.weight, self.variance_epsilon)
        if fused is None:
            return self._forward_method(x, residual)
        fused(x, residual, self.weight, self.variance_epsilon)
        return x, residual

    def slot_of(args, kwargs):
        residual = args[1] if len(args) > 1 else kwargs.get("residual")
        return "rms_norm" if residual is None else "fused_add_rms_norm"

    return _replacement(base, slots, routed, slot_of,
                        lambda layer: "" if layer.variance_size_override is None else "variance_size_override")


def silu_and_mul_class(base, ops: dict):
    op = ops["silu_and_mul"]

    def routed(self, x):
        return op(x)

    return _replacement(base, ("silu_and_mul",), routed)


def gelu_and_mul_class(base, ops: dict):
    op = ops["gelu_and_mul"]

    def routed(self, x):
        return op(x, self.approximate)

    return _replacement(base, ("gelu_and_mul",), routed)


def rotary_class(base, ops: dict):
    op = ops["rotary_embedding"]

    def routed(self, positions, query, key=None):
        cos_sin_cache = self._match_cos_sin_cache_dtype(query)
        op(positions, query, key, self.head_size, cos_sin_cache, self.is_neox_style)
        return query, key

    return _replacement(base, ("rotary_embedding",), routed)
