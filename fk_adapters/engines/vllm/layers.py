"""Out-of-tree replacements for vLLM's CustomOp layers, one per in-tree class.

Each replacement subclasses the in-tree class (vLLM's ``CustomOp.register_oot`` requires
it) and overrides ``forward`` so the plugin kernel runs in every mode, eager or compiled.
Per call it only adapts arguments to the slot interface; nothing with Python side
effects happens in ``forward`` (Dynamo traces it); counting is done inside the op.
"""
from __future__ import annotations

from fk_adapters import probe


def rms_norm_class(base, ops: dict):
    """RMSNorm: 'rms_norm' without residual, 'fused_add_rms_norm' with it."""
    plain, fused = ops.get("rms_norm"), ops.get("fused_add_rms_norm")
    slots = tuple(s for s in ("rms_norm", "fused_add_rms_norm") if s in ops)

    class FkRMSNorm(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._fk_routed = getattr(self, "variance_size_override", None) is None
            probe.layer_built(slots, None if self._fk_routed else "variance_size_override")

        def forward(self, x, residual=None):
            if not self._fk_routed:
                return self._forward_method(x, residual)
            if residual is None:
                if plain is None:
                    return self._forward_method(x, residual)
                return plain(x, self.weight, self.variance_epsilon)
            if fused is None:
                return self._forward_method(x, residual)
            fused(x, residual, self.weight, self.variance_epsilon)
            return x, residual

    return FkRMSNorm


def _routed(base, slot: str, forward):
    """A replacement of ``base`` whose every instance routes ``forward`` to the slot's op."""

    class FkLayer(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            probe.layer_built((slot,))

    FkLayer.forward = forward
    return FkLayer


def silu_and_mul_class(base, ops: dict):
    op = ops["silu_and_mul"]
    return _routed(base, "silu_and_mul", lambda self, x: op(x))


def gelu_and_mul_class(base, ops: dict):
    op = ops["gelu_and_mul"]
    return _routed(base, "gelu_and_mul", lambda self, x: op(x, self.approximate))


def rotary_class(base, ops: dict):
    op = ops["rotary_embedding"]

    def forward(self, positions, query, key=None):
        cos_sin_cache = self._match_cos_sin_cache_dtype(query)
        op(positions, query, key, self.head_size, cos_sin_cache, self.is_neox_style)
        return query, key

    return _routed(base, "rotary_embedding", forward)
