"""Where catalog slots enter SGLang 0.5.15's diffusion runtime (``sglang.multimodal_gen``): its own layer classes,
not ``sglang.srt.layers`` (``docs/design/sglang-diffusion.md`` section 3). Pure Python: nothing here imports sglang.

The linear method and RMSNorm have SRT's signatures (RMSNorm without ``post_residual_addition``), so SRT's adapters
serve them. Attention is new: the DiT's attention implementations take ``[B, S, H, D]`` query, key and value and
return ``[B, S, Hq, D]``; the ``sdpa`` slot is ``[B, H, L, D]``, so the adapter transposes the views.
"""
from __future__ import annotations

from fk_adapters.engines.sglang import targets
from fk_adapters.engines.sglang.base import Stock, Target, own_path


def _sdpa_why(query, key, value, causal: bool) -> str:
    """Why a dense attention call cannot take the slot ("" if it can)."""
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return "query, key or value not [B, S, H, D]"
    if query.numel() == 0:
        return "empty input"
    if not query.shape[-1] == key.shape[-1] == value.shape[-1]:
        return "value head size unlike the query's"
    if query.shape[2] % key.shape[2]:
        return f"{query.shape[2]} query heads over {key.shape[2]} kv heads"
    if causal and query.shape[1] != key.shape[1]:
        return "causal over more keys than queries (flash attention aligns it bottom-right, the slot top-left)"
    return ""


def _sdpa(op, query, key, value, causal: bool, scale: float):
    if stock := own_path("sdpa"):  # the passthrough: each implementation's own kernel, left where it runs
        return stock
    out = op(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), None, causal, float(scale))
    return out.transpose(1, 2).contiguous()


def flash_attention(ops, impl, query, key, value, attn_metadata=None):
    """FlashAttentionImpl.forward(query, key, value, attn_metadata=None, *, return_softmax_lse=False) ->
    [B, S, Hq, D]: dense batches (no cumulative sequence lengths). A call passing ``return_softmax_lse`` passes an
    argument the adapter does not know, so it stays stock (``calls.unknown``)."""
    op = ops.get("sdpa")
    if op is None:
        return Stock("sdpa")
    lengths = (getattr(attn_metadata, "max_seqlen_q", None), getattr(attn_metadata, "max_seqlen_k", None))
    why = (("" if lengths[0] in (None, query.shape[1]) and lengths[1] in (None, key.shape[1])
            else f"metadata sequence lengths {lengths} unlike the tensors'")
           or _sdpa_why(query, key, value, bool(impl.causal)))
    return Stock("sdpa", why) if why else _sdpa(op, query, key, value, bool(impl.causal), impl.softmax_scale)


def torch_sdpa(ops, impl, query, key, value, attn_metadata):
    """SDPAImpl.forward(query, key, value, attn_metadata) -> [B, S, Hq, D] (torch's kernel, e.g. CLIP's encoder)."""
    op = ops.get("sdpa")
    if op is None:
        return Stock("sdpa")
    dropout = float(getattr(impl, "dropout", 0.0) or 0.0)
    why = (f"dropout {dropout}" if dropout > 0 else "") or _sdpa_why(query, key, value, bool(impl.causal))
    return Stock("sdpa", why) if why else _sdpa(op, query, key, value, bool(impl.causal), impl.softmax_scale)


_MG = "sglang.multimodal_gen.runtime.layers."
_BACKENDS = _MG + "attention.backends."
TARGETS: tuple[Target, ...] = (
    Target(_MG + "layernorm.RMSNorm", ("rms_norm", "fused_add_rms_norm"), targets.rms_norm,
           targets.rms_layer_check, slot_of=targets.rms_slot),
    Target(_MG + "linear.UnquantizedLinearMethod", ("gemm",), targets.gemm, method="apply",
           init_cls=_MG + "linear.LinearBase", built=targets.linear_built),
    Target(_BACKENDS + "flash_attn.FlashAttentionImpl", ("sdpa",), flash_attention, method="forward",
           built=lambda impl: ""),
    Target(_BACKENDS + "sdpa.SDPAImpl", ("sdpa",), torch_sdpa, method="forward", built=lambda impl: ""),
)
