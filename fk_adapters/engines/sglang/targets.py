"""Where each catalog slot enters SGLang 0.5.15, and how a hooked call maps to the slot.

Pure Python: nothing here imports sglang. On CUDA every SGLang op (``MultiPlatformOp``)
dispatches to ``forward_cuda``; each :class:`Target` is one such method, wrapped by an
AROUND hook (``make_hook``). The hook gets ``(original, self, *args, **kwargs)``; the
target's adapter turns that call into one slot call and returns what SGLang's own
method returns. The adapter's own parameters are the call's it knows: a call with any
other argument (SGLang 0.5.23's ``quant_linear``, an extra positional), or one the slot
interface does not cover, yields :class:`Stock` and the hook runs ``original`` (SGLang's
stock path) with every argument, counted in ``probe.not_routed``: such calls are never
claimed as the plugin's. Always call ``original``, never a saved reference: SGLang
rebinds every module attribute that *is* the patched object.
"""
from __future__ import annotations

from collections.abc import Callable

from fk_adapters import probe, safety
from fk_adapters.engines import calls
from fk_adapters.engines.sglang import collective, linear_attention
from fk_adapters.engines.sglang.base import NOT_SELECTED, Runtime, Stock, Target, own_path  # noqa: F401 (re-exported)
from fk_adapters.tasks import SLOTS


def _weight(layer):
    w = layer.weight
    return getattr(w, "data", w)


def rms_layer_check(layer) -> str:
    if getattr(layer, "variance_size_override", None) is not None:
        return "variance_size_override"
    if getattr(layer, "cast_x_before_out_mul", False):
        return "cast_x_before_out_mul"
    return ""


def rms_norm(ops, layer, x, residual=None, post_residual_addition=None):
    """RMSNorm.forward_cuda(x, residual=None, post_residual_addition=None).

    No residual: returns a new tensor (x of any rank is flattened to 2D, as SGLang does).
    With residual: in place on x and residual, returns ``(x, residual)``.
    """
    slot = "rms_norm" if residual is None else "fused_add_rms_norm"
    op = ops.get(slot)
    if op is None:
        return Stock(slot)
    w = _weight(layer)
    why = (rms_layer_check(layer)
           or ("post_residual_addition" if post_residual_addition is not None else "")
           or ("empty input" if x.numel() == 0 else "")
           or ("batch-invariant mode" if Runtime.batch_invariant() else "")
           or ("weight dtype/device differs from x" if (w.dtype, w.device) != (x.dtype, x.device) else ""))
    if not why and residual is not None:
        if x.dim() != 2 or residual.shape != x.shape:
            why = "residual call not on [T, H]"
        elif residual.dtype != x.dtype:
            why = "residual dtype differs from x"
    if why:
        return Stock(slot, why)
    eps = float(layer.variance_epsilon)
    if residual is not None:
        op(x, residual, w, eps)
        return x, residual
    if x.dim() != 2:
        shape = x.shape
        return op(x.contiguous().reshape(-1, shape[-1]), w, eps).reshape(shape)
    return op(x, w, eps)


def rms_slot(args: tuple, kwargs: dict) -> str:
    residual = args[1] if len(args) > 1 else kwargs.get("residual")
    return "rms_norm" if residual is None else "fused_add_rms_norm"


def _gated_check(x) -> str:
    return ("empty input" if x.numel() == 0 else "") or ("odd last dimension" if x.shape[-1] % 2 else "")


def silu_and_mul(ops, layer, x):
    """SiluAndMul.forward_cuda(x) -> new tensor [..., d]."""
    op = ops.get("silu_and_mul")
    if op is None:
        return Stock("silu_and_mul")
    why = _gated_check(x)
    return Stock("silu_and_mul", why) if why else op(x)


def gelu_and_mul(ops, layer, x):
    """GeluAndMul.forward_cuda(x) -> new tensor; ``layer.approximate`` is "none" or "tanh"."""
    op = ops.get("gelu_and_mul")
    if op is None:
        return Stock("gelu_and_mul")
    approximate = getattr(layer, "approximate", None)
    why = _gated_check(x) or (
        "" if approximate in ("none", "tanh") else f"approximate={approximate!r}")
    return Stock("gelu_and_mul", why) if why else op(x, approximate)


def rotary_layer_check(layer) -> str:
    width = layer.cos_sin_cache.shape[-1]
    return "" if width == layer.rotary_dim else f"cos_sin_cache width {width} != rotary_dim {layer.rotary_dim}"


def rotary_embedding(ops, layer, positions, query, key, offsets=None, fused_set_kv_buffer_arg=None):
    """RotaryEmbedding.forward_cuda(positions, query, key, offsets=None, fused_set_kv_buffer_arg=None).

    In place on query and key; returns ``(query, key)``. The cache is passed as SGLang holds
    it (float32 on CUDA), so a kernel must accept a cache dtype other than the query's.
    """
    op = ops.get("rotary_embedding")
    if op is None:
        return Stock("rotary_embedding")
    cache = layer.cos_sin_cache
    why = (rotary_layer_check(layer)
           or ("fused_set_kv_buffer_arg (fused KV-cache write)" if fused_set_kv_buffer_arg is not None else "")
           or ("offsets" if offsets is not None else "")
           or ("key is None" if key is None else "")
           or ("positions not 1-D" if positions.dim() != 1 else "")
           or ("empty input" if positions.numel() == 0 else "")
           or ("query/key not [T, H*D]" if query.dim() != 2 or key.dim() != 2 else "")
           or ("cos_sin_cache on another device" if cache.device != query.device else ""))
    if why:
        return Stock("rotary_embedding", why)
    op(positions, query, key, int(layer.head_size), cache, bool(layer.is_neox_style))
    return query, key


# ----------------------------------------------------------------------------------------------------------- gemm
_FLOATS = ("torch.bfloat16", "torch.float16", "torch.float32")


def linear_built(layer) -> str:
    """A linear layer routes only with the unquantized method (``UnquantizedLinearMethod.apply`` is hooked)."""
    name = type(getattr(layer, "quant_method", None)).__name__
    return "" if name == "UnquantizedLinearMethod" else f"quant_method {name}"


def gemm(ops, method, layer, x, bias=None):
    """UnquantizedLinearMethod.apply(layer, x, bias=None) -> x @ layer.weight.T (+ bias), leading dims kept."""
    op = ops.get("gemm")
    if op is None:
        return Stock("gemm")
    w = layer.weight
    w = getattr(w, "data", w)
    why = (("weight is a tensor subclass" if type(w).__name__ != "Tensor" else "")
           or ("empty input" if x.numel() == 0 else "")
           or ("" if str(x.dtype) in _FLOATS and w.dtype == x.dtype else f"x {x.dtype}, weight {w.dtype}")
           or ("bias dtype differs from x" if bias is not None and bias.dtype != x.dtype else "")
           or ("batch-invariant mode" if Runtime.batch_invariant() else "")
           or Runtime.linear_backend_why())
    if why:
        return Stock("gemm", why)
    y = op(x.reshape(-1, x.shape[-1]), w, bias)
    return y.reshape(x.shape[:-1] + y.shape[-1:])


_PLAIN_HEAD_METHODS = ("UnquantizedEmbeddingMethod", "UnquantizedLinearMethod")


def lm_head(ops, processor, hidden_states, lm_head, embedding_bias=None):
    """LogitsProcessor._compute_lm_head(hidden_states, lm_head, embedding_bias=None) -> logits [T, V_padded].

    Only its plain branch routes (an unquantized head's ``hidden_states @ lm_head.weight.T``, which ignores
    ``embedding_bias`` as stock does); LoRA, fp32 heads, quantized heads and the RL on-policy cast stay stock."""
    op = ops.get("gemm")
    if op is None:
        return Stock("gemm")
    method = type(getattr(lm_head, "quant_method", None)).__name__
    w = getattr(lm_head, "weight", None)
    why = (("LoRA head" if hasattr(lm_head, "set_lora") else "")
           or ("" if method in _PLAIN_HEAD_METHODS else f"lm_head quant_method {method}")
           or ("no weight" if w is None else "")
           or ("fp32 lm_head" if getattr(processor, "use_fp32_lm_head", False) else "")
           or ("Intel AMX" if getattr(lm_head, "use_intel_amx_backend", False) else "")
           or Runtime.lm_head_why())
    if not why:
        w = getattr(w, "data", w)
        why = (("empty input" if hidden_states.numel() == 0 else "")
               or ("" if hidden_states.dim() == 2 else "hidden_states not [T, H]")
               or ("" if str(w.dtype) in _FLOATS and w.dtype == hidden_states.dtype
                   else f"hidden {hidden_states.dtype}, weight {w.dtype}")
               or ("batch-invariant mode" if Runtime.batch_invariant() else ""))
    return Stock("gemm", why) if why else op(hidden_states, w, None)


# ------------------------------------------------------------------------------------------------------ fused_moe
def moe_method_why(method, layer) -> str:
    """Why an ``UnquantizedFusedMoEMethod`` layer's forward cannot take the slot ("" if it can)."""
    runner = getattr(method, "runner", None)
    backend = getattr(runner, "runner_backend", None)
    if backend is None or not backend.is_triton():
        return f"MoE runner backend {getattr(backend, 'name', backend)}"
    cfg = method.moe_runner_config
    act = cfg.activation
    return (("aiter runner" if getattr(method, "_aiter_runner", None) is not None else "")
            or ("non-gated activation" if not cfg.is_gated else "")
            or ("no_combine" if cfg.no_combine else "")
            or ("swiglu_limit" if cfg.swiglu_limit is not None else "")
            or ("" if act in ("silu", "gelu") else f"activation {act!r}")
            or ("clamp limit without alpha" if cfg.gemm1_alpha is None and cfg.gemm1_clamp_limit is not None else "")
            or ("alpha with split gate/up rows" if cfg.gemm1_alpha is not None and (
                act != "silu" or not cfg.gate_up_interleaved) else "")
            or ("expert parallel (local experts only)" if cfg.num_experts != cfg.num_local_experts else ""))


def moe_built(layer) -> str:
    """A FusedMoE layer routes only with the unquantized method on the Triton runner."""
    method = getattr(layer, "quant_method", None)
    name = type(method).__name__
    return moe_method_why(method, layer) if name == "UnquantizedFusedMoEMethod" else f"quant_method {name}"


def fused_moe(ops, method, layer, dispatch_output):
    """UnquantizedFusedMoEMethod.forward_cuda(layer, dispatch_output) -> StandardCombineInput(out [T, H]).

    Routing is SGLang's (``dispatch_output.topk_output``); the routed scaling factor is applied here, inside the
    slot, as SGLang's Triton reduce does. The slot writes a new tensor (stock writes into x: no caller reads it)."""
    op = ops.get("fused_moe")
    if op is None:
        return Stock("fused_moe")
    x, topk = dispatch_output.hidden_states, dispatch_output.topk_output
    w13, w2 = layer.w13_weight, layer.w2_weight
    why = (moe_method_why(method, layer)
           or ("" if type(topk).__name__ == "StandardTopKOutput" else f"top-k output {type(topk).__name__}")
           or ("hidden_states_scale (quantized dispatch)" if dispatch_output.hidden_states_scale is not None else "")
           or ("empty input" if x.numel() == 0 else "")
           or ("" if str(x.dtype) in _FLOATS and w13.dtype == x.dtype else f"x {x.dtype}, weights {w13.dtype}")
           or ("batch-invariant mode" if Runtime.batch_invariant() else ""))
    if why:
        return Stock("fused_moe", why)
    cfg = method.moe_runner_config
    swiglu = cfg.gemm1_alpha is not None
    out = op(x, w13, w2, topk.topk_weights, topk.topk_ids, "swigluoai" if swiglu else cfg.activation,
             bool(cfg.apply_router_weight_on_input), getattr(layer, "w13_weight_bias", None),
             getattr(layer, "w2_weight_bias", None), float(cfg.gemm1_alpha) if swiglu else 1.702,
             float("inf") if cfg.gemm1_clamp_limit is None else float(cfg.gemm1_clamp_limit),
             float(cfg.routed_scaling_factor or 1.0))
    return Runtime.combine(hidden_states=out)


# ------------------------------------------------------------------------------------------------ paged_attention
def attention_built(layer) -> str:
    """Why a ``RadixAttention`` layer never routes ("" if it can, on fa3)."""
    return (("cross attention" if layer.is_cross_attention else "")
            or ("" if getattr(layer.attn_type, "value", layer.attn_type) == "decoder"
                else f"{getattr(layer.attn_type, 'value', layer.attn_type)} attention")
            or ("chunked local attention (iRoPE)" if getattr(layer, "use_irope", False) else "")
            or ("" if layer.logit_capping_method == "tanh" else f"logit capping {layer.logit_capping_method}")
            or ("quantized attention" if layer.quant_method is not None else "")
            or Runtime.attention_backend_why())


def _attention_why(backend, layer, forward_batch, q_rope, k_rope, sinks) -> str:
    md = backend.forward_metadata
    swa = layer.sliding_window_size is not None and layer.sliding_window_size > -1
    return (("MLA" if backend.use_mla else "")
            or attention_built(layer)
            or ("sinks" if sinks is not None else "")
            or ("q_rope/k_rope" if q_rope is not None or k_rope is not None else "")
            or ("" if backend.kv_cache_dtype_str == "auto" else f"KV cache dtype {backend.kv_cache_dtype_str}")
            or ("embedding mode (no KV cache)" if backend.fa_skip_kv_cache else "")
            or ("context parallel" if backend.attn_cp_size > 1 else "")
            or ("prefill-aware SWA" if backend.is_prefill_aware_swa else "")
            or ("SWA layer on the SWA KV pool" if swa and backend.use_sliding_window_kv_pool else "")
            or ("speculative SWA metadata" if swa and getattr(md, "swa_spec_metadata", None) is not None else "")
            or ("speculative decoding" if forward_batch.spec_info is not None else ""))


def _attention(ops, backend, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None,
               sinks=None, *, modes: tuple[str, ...]):
    op = ops.get("paged_attention")
    if op is None:
        return Stock("paged_attention")
    mode = forward_batch.forward_mode.name
    why = ("" if mode in modes else f"forward mode {mode}") or _attention_why(backend, layer, forward_batch, q_rope,
                                                                                k_rope, sinks)
    if why:
        return Stock("paged_attention", why)
    if stock := own_path("paged_attention"):  # the slot leaves out what SGLang tunes FA3's call with
        return stock
    md = backend.forward_metadata
    if k is not None and save_kv_cache:  # the engine's own cache write, as its forward starts with it
        backend.token_to_kv_pool.set_kv_buffer(layer, Runtime.kv_write_loc(forward_batch.out_cache_loc,
                                                                           md.swa_out_cache_loc),
                                               k, v, layer.k_scale, layer.v_scale)
    hq, hkv, d, dv = layer.tp_q_head_num, layer.tp_k_head_num, layer.head_dim, layer.v_head_dim
    k_cache, v_cache = backend.token_to_kv_pool.get_kv_buffer(layer.layer_id)
    given = getattr(forward_batch, "_attn_output", None)
    out = given.view(-1, hq, dv) if given is not None else q.new_empty(q.shape[0], hq, dv)
    window = layer.sliding_window_size if layer.sliding_window_size is not None else -1
    op(q.contiguous().view(-1, hq, d), k_cache.view(-1, backend.page_size, hkv, d),
       v_cache.view(-1, backend.page_size, hkv, dv), md.page_table, md.cache_seqlens_int32, md.cu_seqlens_q,
       int(md.max_seq_len_q), float(layer.scaling), int(window) if window > -1 else -1,
       float(layer.logit_cap or 0.0), out)
    return out.view(-1, hq * dv)


def attention_extend(ops, backend, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None,
                     sinks=None):
    """FlashAttentionBackend.forward_extend(q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
    k_rope=None, sinks=None) -> [T, Hq * Dv]: plain prefill / extend (and mixed) batches; writes the new keys and
    values with the engine's ``set_kv_buffer`` first, then the slot over the paged cache."""
    return _attention(ops, backend, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, sinks,
                      modes=("EXTEND", "MIXED"))


def attention_decode(ops, backend, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None,
                     sinks=None):
    """FlashAttentionBackend.forward_decode(...), same arguments and result: plain decode batches (under SGLang's
    full decode graphs this runs at capture: the slot's kernel is replayed on the backend's persistent buffers)."""
    return _attention(ops, backend, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, sinks,
                      modes=("DECODE",))


_L = "sglang.srt.layers."
_FA = _L + "attention.flashattention_backend.FlashAttentionBackend"
TARGETS: tuple[Target, ...] = (
    Target(_L + "layernorm.RMSNorm", ("rms_norm", "fused_add_rms_norm"), rms_norm, rms_layer_check,
           slot_of=rms_slot),
    Target(_L + "activation.SiluAndMul", ("silu_and_mul",), silu_and_mul),
    Target(_L + "activation.GeluAndMul", ("gelu_and_mul",), gelu_and_mul),
    Target(_L + "rotary_embedding.base.RotaryEmbedding", ("rotary_embedding",), rotary_embedding, rotary_layer_check),
    Target(_L + "quantization.unquant.UnquantizedLinearMethod", ("gemm",), gemm, method="apply",
           init_cls=_L + "linear.LinearBase", built=linear_built),
    Target(_L + "logits_processor.LogitsProcessor", ("gemm",), lm_head, method="_compute_lm_head",
           built=lambda processor: ""),
    Target(_L + "quantization.unquant.UnquantizedFusedMoEMethod", ("fused_moe",), fused_moe,
           init_cls=_L + "moe.fused_moe_triton.layer.FusedMoE", built=moe_built),
    Target(_FA, ("paged_attention",), attention_extend, method="forward_extend",
           init_cls=_L + "radix_attention.RadixAttention", built=attention_built),
    Target(_FA, ("paged_attention",), attention_decode, method="forward_decode", counts_layers=False),
) + linear_attention.TARGETS + collective.TARGETS

# Catalog slots with no SGLang target, and SGLang layers known to stay stock.
UNCOVERED_SLOTS: dict[str, str] = {name: s.not_entered["sglang"] for name, s in SLOTS.items()
                                   if "sglang" in s.not_entered}
KNOWN_NOT_ROUTED: dict[str, str] = {
    _L + "layernorm.GemmaRMSNorm": "scales by (1 + weight): no catalog slot",
    _L + "layernorm.Gemma3RMSNorm": "scales by (1 + weight): no catalog slot",
    _L + "layernorm.Gemma4RMSNorm": "own forward_cuda, not the rms_norm interface",
    _L + "layernorm.RMSNormWithoutScale": "no weight: not the rms_norm interface",
    _L + "rotary_embedding.mrope.MRotaryEmbedding": "overrides forward_cuda (multimodal positions), subclasses too",
    _L + "rotary_embedding.rope_variant.Llama4VisionRotaryEmbedding": "overrides forward",
    _L + "rotary_embedding.rope_variant.DualChunkRotaryEmbedding": "not a RotaryEmbedding subclass",
    _L + "rotary_embedding.rope_variant.Phi3LongRoPEScaledRotaryEmbedding": "plain nn.Module",
    "sglang.srt.models.glm4v.Glm4vRMSNorm": "overrides forward",
    "sglang.srt.models.gemma3n_causal.Gemma3nRMSNorm": "overrides forward",
    _L + "moe.ep_moe.layer.DeepEPMoE": "all-to-all expert parallel: its own forward",
}


def by_slot() -> dict[str, Target]:
    """The first target of each slot (gemm has a second one: the logits processor's lm_head)."""
    out: dict[str, Target] = {}
    for t in TARGETS:
        for s in t.slots:
            out.setdefault(s, t)
    return out


def layer_reason(target: Target, layer, hooked: Callable, host_forward: Callable) -> str:
    """Why this built layer never reaches the hooked method ("" if its calls can route)."""
    fm = getattr(layer, "_forward_method", None)
    if getattr(fm, "__func__", None) is not hooked:
        return f"{type(layer).__name__} dispatches to {getattr(fm, '__qualname__', fm)}"
    if getattr(type(layer), "forward", None) is not host_forward:
        return f"{type(layer).__name__} overrides forward"
    return target.layer_check(layer)


def _compiling() -> bool:
    try:
        import torch

        return torch.compiler.is_compiling()
    except (ImportError, AttributeError):
        return False


def make_hook(target: Target, ops: dict, drift: str = "") -> Callable:
    """The AROUND hook for ``target.path``: route to the slot op, or run SGLang's original with every argument.

    ``drift``: why no call can be trusted to the adapter (the in-tree signature is not the one it knows)."""
    adapter, params = target.adapter, target.params

    def hook(original, *args, **kwargs):
        call = args[1:] if target.bound else args  # after the layer, for a method
        why = drift or calls.unknown(params, call, kwargs)
        out = Stock(target.slot(call, kwargs), why) if why else adapter(ops, *args, **kwargs)
        if isinstance(out, Stock):
            if out.why and out.slot in ops:
                calls.left_stock(out.slot, out.why)
            return original(*args, **kwargs)
        return out

    hook.__qualname__ = f"fk_{target.method}_hook"
    return hook


def make_layer_counter(target: Target, slots, host: Callable[[], type], drift: str = "") -> Callable:
    """count(layer): one layer built for ``slots``, counted as routable or, with why, as never routing."""

    def count(layer):
        if target.built:
            why = target.built(layer)
            if why is None:  # nothing this slot could ever route (a one-rank group): not counted
                return
            why = drift or why
        else:
            cls = host()
            why = drift or layer_reason(target, layer, getattr(cls, target.method), getattr(cls, "forward", None))
        probe.layer_built(slots, why)

    return count


def make_counting_hook(counters: list[Callable]) -> Callable:
    """AROUND hook for a constructor: build the layer, then count it with every counter (the targets whose
    layers it builds: one hook per constructor however many targets count there)."""

    def hook(original, layer, *args, **kwargs):
        original(layer, *args, **kwargs)
        for count in counters:
            count(layer)

    return hook


def make_init_hook(target: Target, slots: tuple[str, ...], host: Callable[[], type], drift: str = "") -> Callable:
    """AROUND hook for ``target.init_path``: count layers built that can (or never can) route."""
    return make_counting_hook([make_layer_counter(target, slots, host, drift)])


class ModeGuard:
    """Refuse kernels not declared safe for the engine's mode, at their first call.

    SGLang publishes its server args in a scheduler only after plugins are loaded, so the
    mode is read lazily (``modes() -> (compiled, cuda_graphs)``). As a backstop, a kernel
    not declared cuda_graph_safe is refused whenever it is called during a graph capture.
    """

    def __init__(self, kernels: dict, modes: Callable[[], tuple[bool, bool]],
                 capturing: Callable[[], bool] = lambda: False):
        self.kernels, self.modes, self.capturing = kernels, modes, capturing
        self.checked = False
        self.graph_unsafe = {s for s, (_, k) in kernels.items() if not k.cuda_graph_safe}

    def check(self, slot: str) -> None:
        if not self.checked:
            safety.check(self.kernels, *self.modes())
            self.checked = True
        if slot in self.graph_unsafe and not _compiling() and self.capturing():
            plugin, _ = self.kernels[slot]
            raise safety.UnsafeKernelError(f"{plugin}:{slot} is not declared cuda_graph_safe, and SGLang is "
                                           "capturing a CUDA graph (run it in eager mode: --mode eager)")

    def wrap(self, slot: str, op: Callable) -> Callable:
        def guarded(*args):
            self.check(slot)
            return op(*args)

        guarded.__qualname__ = f"guarded_{slot}"
        return guarded
