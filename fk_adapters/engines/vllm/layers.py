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
from fk_adapters.engines.vllm import compat, natives

# the in-tree methods a replacement stands for (CustomOp dispatches to one of them)
IN_TREE_METHODS = ("forward_native", "forward_cuda", "forward_cpu")

# {slot: op key} of the chosen engine-own kernels (passthrough): set by install. In a build whose compiled mode has
# Inductor compile the slot's stock call (``compiled_vllm.stock_seen_by_inductor``), their calls stay on it, as stock's.
NATIVE_PATH: dict[str, str] = {}
_compiles: dict[tuple[str, int], bool] = {}
# engine-own slots whose calls stay on stock's path in every mode: fk's native is not stock's call. fused_moe: stock's
# method runs vLLM's modular kernel (its prepare / finalize), fk's native calls ``fused_experts`` after masking the
# expert ids; session 58's fk46-qwen3-next passthrough ran four extra kernels a MoE layer a step (1% of its device
# time) and lacked stock's ``memcpy32_post``
STOCK_PATH_ALWAYS = ("fused_moe",)


def native_path_slots(slots) -> frozenset[str]:
    """The ``slots`` whose calls stay on stock's path in the model being built (engine-own only): vLLM's compiled
    native path, or stock's call in every mode (``STOCK_PATH_ALWAYS``)."""
    always = frozenset(s for s in slots if s in NATIVE_PATH and s in STOCK_PATH_ALWAYS)
    mine = [s for s in slots if s in NATIVE_PATH and s not in always]
    if not mine:
        return always
    from vllm.config import get_current_vllm_config

    from fk_adapters.check import compiled_vllm

    config = get_current_vllm_config()
    for s in mine:
        if (s, id(config)) not in _compiles:
            _compiles[s, id(config)] = compiled_vllm.stock_seen_by_inductor(s, config)
    return always | frozenset(s for s in mine if _compiles[s, id(config)])


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
            self._fk_native = native_path_slots(slots) if self._fk_routed else frozenset()
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
            if self._fk_native:
                slot = pick(args, kwargs)
                if slot in self._fk_native:
                    calls.on_native_path(NATIVE_PATH[slot])
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


def gated_norm_why(layer) -> str:
    """Why a built Mixer2RMSNormGated never routes ("" if it can): the slot normalizes whole groups on one rank."""
    if not layer.use_rms_norm:
        return "use_rms_norm=False (the gate alone)"
    if layer.n_groups % layer.tp_size:  # one group over 2+ ranks included
        return f"{layer.n_groups} group(s) over {layer.tp_size} ranks: the norm reduces across ranks"
    return ""


def gated_norm_class(base, ops: dict):
    """Mamba2's Mixer2RMSNormGated: 'gated_rms_norm' (x and gate of any leading shape, flattened to rows)."""
    op = ops["gated_rms_norm"]

    def routed(self, x, gate):
        y = op(x.reshape(-1, x.shape[-1]), gate.reshape(-1, gate.shape[-1]), self.weight, self.variance_epsilon,
               self.group_size)
        return y.reshape(x.shape)

    return _replacement(base, ("gated_rms_norm",), routed, layer_check=gated_norm_why)


# ----------------------------------------------------------------------------------------------------------- gemm
def _gemm_apply(op, stock):
    def apply(self, layer, x, bias=None):  # traced under torch.compile: no Python side effects here
        if self._fk_native:  # engine-own, and Inductor compiles stock's call: left to it, as stock
            calls.on_native_path(NATIVE_PATH["gemm"])
            return stock.apply(self, layer, x, bias)
        y = op(x.reshape(-1, x.shape[-1]), layer.weight, bias)
        return y.reshape(x.shape[:-1] + y.shape[-1:])

    return apply


def _method_swapping_layer(base, stock_method, fk_method):
    """A ``base`` subclass whose layers built with exactly ``stock_method`` get ``fk_method`` (its GEMM in the slot);
    any other method (a quantized layer) stays, counted as left stock with its class name."""

    class FkLayer(base):
        _fk_drift = ""  # set by install: why no layer of this vLLM can route

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)  # 0.32's method reads the vLLM config: build ours here, not earlier
            method = type(self.quant_method)
            why = self._fk_drift or ("" if method is stock_method else f"quant_method {method.__name__}")
            if not why:
                self.quant_method = fk_method()
                self.quant_method._fk_native = "gemm" in native_path_slots(("gemm",))
            probe.layer_built(("gemm",), why or None)

    FkLayer._fk_params = calls.Params.of(fk_method.apply, skip=1)
    FkLayer._fk_drift_of = (stock_method, ("apply",))  # where the GEMM is: the method, not forward
    FkLayer._fk_pluggable = True  # a PluggableLayer, not a CustomOp
    return FkLayer


def linear_class(base, ops: dict):
    """A linear layer class whose unquantized layers run their GEMM through the 'gemm' op.

    Only a layer whose ``quant_method`` is exactly ``UnquantizedLinearMethod`` routes (its method is swapped for
    one whose ``apply`` calls the op); a quantized layer keeps its method and is counted as left stock. vLLM's TP
    logic, bias handling and weight loading stay the layer's own."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    class FkUnquantizedLinearMethod(UnquantizedLinearMethod):
        _fk_native = False  # set per layer where its calls stay stock's (``native_path_slots``)

        def process_weights_after_loading(self, layer):
            from vllm.platforms import current_platform

            if not current_platform.is_cpu():
                return super().process_weights_after_loading(layer)
            # the slot takes the weight: keep it next to the engine's packed handle (2x weights, CPU only)
            compat.keep_weight_cpu_linear(layer)
            if hasattr(layer, "cpu_linear"):  # none for a 3-D weight (Mamba's conv1d): not a GEMM, never applied
                natives.remember((layer.weight,), layer.cpu_linear)

        apply = _gemm_apply(ops["gemm"], UnquantizedLinearMethod)

    return _method_swapping_layer(base, UnquantizedLinearMethod, FkUnquantizedLinearMethod)


def lm_head_class(base, ops: dict):
    """``ParallelLMHead`` whose logits GEMM (``UnquantizedEmbeddingMethod.apply``, called by the logits processor)
    runs through the 'gemm' op; the weight is the padded vocab's, as stock's."""
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    class FkUnquantizedEmbeddingMethod(UnquantizedEmbeddingMethod):
        _fk_native = False

        def process_weights_after_loading(self, layer):
            super().process_weights_after_loading(layer)  # on a CPU: the packed handle, the weight kept
            if hasattr(layer, "cpu_linear"):
                natives.remember((layer.weight,), layer.cpu_linear)

        apply = _gemm_apply(ops["gemm"], UnquantizedEmbeddingMethod)

    return _method_swapping_layer(base, UnquantizedEmbeddingMethod, FkUnquantizedEmbeddingMethod)


# ------------------------------------------------------------------------------------------------------ fused_moe
def moe_method_class(base, ops: dict):
    """``UnquantizedFusedMoEMethod`` whose forward (after the engine's routing) calls the 'fused_moe' op.

    Monolithic backends, EP, LoRA and other layouts stay stock (``compat.moe_left_stock_why``). Where the engine
    prepacks the expert weights in place after loading (vLLM CPU), plain copies are kept for the slot first: twice
    the expert memory, fine for the tiny models fk runs on CPU."""
    op = ops["fused_moe"]

    def routed(self, layer, x, topk_weights, topk_ids, shared_experts=None, shared_experts_input=None):
        why = ("expert_map (expert parallel)" if layer.expert_map is not None else
               "shared experts inside the kernel" if self.mk_can_overlap_shared_experts else "")
        if why:
            calls.left_stock("fused_moe", why)
            return self._forward_method(layer, x, topk_weights, topk_ids, shared_experts, shared_experts_input)
        plain = getattr(layer, "_fk_plain", None) or (layer.w13_weight, layer.w2_weight, _bias(layer, "w13_bias"))
        return op(x, plain[0], plain[1], topk_weights, topk_ids, layer.activation.value,
                  bool(layer.apply_router_weight_on_input), plain[2], _bias(layer, "w2_bias"),
                  float(getattr(layer, "swiglu_alpha", None) or compat.SWIGLU_DEFAULTS["swiglu_alpha"]),
                  float(getattr(layer, "swiglu_limit", None) or compat.SWIGLU_DEFAULTS["swiglu_limit"]),
                  1.0)  # routed_scaling_factor: vLLM's router/runner applies it

    class FkMoEMethod(_replacement(base, ("fused_moe",), routed, layer_check=compat.moe_left_stock_why)):
        def process_weights_after_loading(self, layer):
            prepacked = (self._fk_routed and not self._fk_native
                         and self.unquantized_backend.name in compat.MOE_PREPACKED_BACKENDS)
            plain = tuple(None if t is None else t.detach().clone()
                          for t in (layer.w13_weight, layer.w2_weight, _bias(layer, "w13_bias"))) if prepacked else None
            super().process_weights_after_loading(layer)
            if plain:
                layer._fk_plain = plain
                if getattr(self.moe_kernel.fused_experts, "_use_zentorch", False):
                    return  # zentorch keeps the weights plain: nothing packed to hand over
                pad = (layer.w13_weight.shape[1] - plain[0].shape[1]) // 2
                natives.remember(plain[:2], (layer.w13_weight, layer.w2_weight, self.moe_kernel.fused_experts.isa, pad))

    return FkMoEMethod


def quantized_moe_counter(base, unquantized):
    """A ``RoutedExperts`` (vLLM's expert-weights layer, built by ``FusedMoE``) that counts each layer whose quant
    method is not ``unquantized`` as a fused_moe layer left stock: such a layer never builds the method fk's MoE
    seam replaces, so nothing else would count it. Counts only: the layer is the engine's own."""

    class FkRoutedExperts(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            method = self.quant_method
            if not isinstance(method, unquantized):
                probe.layer_built(("fused_moe",), f"quant_method {type(method).__name__}")

    return FkRoutedExperts


def _bias(layer, name: str):
    return getattr(layer, name, None)
