"""vLLM's compiled mode per slot: which slots it runs as their ``forward_native`` through Inductor, and that forward.

vLLM's default config with Inductor sets ``custom_ops = ["none"]`` (config/vllm.py, ``VllmConfig.__post_init__``):
every ``CustomOp`` is disabled unless listed with ``+``, and a disabled one dispatches to ``forward_native``
(model_executor/custom_op.py, ``dispatch_forward``), which Inductor then compiles with the graph around it. vLLM's
RMSNorm goes through vLLM IR ops (``vllm.ir.ops.rms_norm``), which Inductor lowers to the provider first in
``kernel_config.ir_op_priority``: ``native`` under Inductor (platforms/cuda.py, ``get_default_ir_op_priority``).
Which slots compile is read from the installed vLLM's own default config (``VllmConfig()``), not assumed.
"""
from __future__ import annotations

import contextlib
import functools
import importlib

from fk_adapters.check.compiled import Native, Plan, compile_native, first_call, mark_tokens_dynamic, qualified

# slot: (module, layer class, CustomOp name, the neighbours its compiled graph includes)
LAYERS = {
    "rms_norm": ("vllm.model_executor.layers.layernorm", "RMSNorm", "rms_norm",
                 "RMSNorm.forward_native(x): the norm alone (its neighbours are matmuls, left to cuBLAS)"),
    "fused_add_rms_norm": ("vllm.model_executor.layers.layernorm", "RMSNorm", "rms_norm",
                           "RMSNorm.forward_native(x, residual): the residual add and the norm in one graph"),
    "silu_and_mul": ("vllm.model_executor.layers.activation", "SiluAndMul", "silu_and_mul",
                     "SiluAndMul.forward_native: the gate alone (between two matmuls, left to cuBLAS)"),
    "gelu_and_mul": ("vllm.model_executor.layers.activation", "GeluAndMul", "gelu_and_mul",
                     "GeluAndMul.forward_native: the gate alone (between two matmuls, left to cuBLAS)"),
    "rotary_embedding": ("vllm.model_executor.layers.rotary_embedding.base", "RotaryEmbedding", "rotary_embedding",
                         "RotaryEmbedding.forward_static: query and key rotated into new tensors (the pass-through "
                         "channels copied), not in place; not fused with a q/k norm"),
    "gated_rms_norm": ("vllm.model_executor.layers.mamba.mamba_mixer2", "Mixer2RMSNormGated", "mixer2_gated_rms_norm",
                       "Mixer2RMSNormGated.forward_native(x, gate) on one rank: the gate, the grouped norm and the "
                       "weight in one graph (the mixer's SSD output before it and out_proj after: not in it)"),
}
IR_OPS = {"rms_norm": "rms_norm", "fused_add_rms_norm": "fused_add_rms_norm"}  # slots vLLM routes through vllm.ir
TOKEN_ARGS = {"rms_norm": (0,), "fused_add_rms_norm": (0, 1), "silu_and_mul": (0,), "gelu_and_mul": (0,),
              "rotary_embedding": (0, 1, 2), "gated_rms_norm": (0, 1)}
_LINEAR_ATTENTION = ("an opaque custom op (vllm::qwen_gdn_attention_core, vllm::mamba_mixer2) and a splitting op of "
                     "vLLM's piecewise graph: its kernels, compiled or not")
KEPT = {
    "gemm": ("UnquantizedLinearMethod calls F.linear: Inductor mostly leaves the matmul to cuBLAS (an extern call), "
             "as eager (but see SEEN_BY_INDUCTOR)"),
    "fused_moe": "FusedMoE runs as the opaque custom op vllm::moe_forward: its kernels, compiled or not",
    "paged_attention": ("attention runs as the opaque custom op vllm::unified_attention_with_output, a splitting op "
                        "of vLLM's piecewise graph: its kernel, compiled or not"),
    "gated_delta_rule": _LINEAR_ATTENTION, "gated_delta_rule_decode": _LINEAR_ATTENTION,
    "ssd_chunk_scan": _LINEAR_ATTENTION, "ssm_state_update": _LINEAR_ATTENTION,
    "all_reduce": ("the all-reduce runs as the opaque custom op vllm::all_reduce (a CPU build calls the communicator "
                   "directly): the communicator's kernel, compiled or not"),
}

# slots kept to their kernel here whose stock call is still ordinary torch code that Inductor sees, where a slot's op
# is opaque to it: an engine-own kernel (passthrough) routed through the op would change stock's compiled graph.
# gemm: Inductor plans the layouts and fusions around stock's matmul (and may decompose a small one); session 57's
# fk46-qwen3-next on an H100 ran other cuBLAS tiles, other Inductor kernels and extra elementwise kernels with the
# passthrough's gemm through fk's op, and its greedy streams differed from process to process where stock's did not
SEEN_BY_INDUCTOR = ("gemm",)


@functools.lru_cache(maxsize=1)
def default_config():
    """The installed vLLM's default config (no model): what ``fk run --mode compiled`` leaves it at."""
    from vllm.config import VllmConfig

    return VllmConfig()


def _settings(cc) -> dict:
    return {"mode": getattr(cc.mode, "name", str(cc.mode)), "backend": cc.backend, "custom_ops": list(cc.custom_ops),
            "inductor_options": inductor_options(cc)}


def inductor_options(cc) -> dict:
    """vLLM's Inductor settings that are plain values (its passes are vLLM's own: not run here)."""
    return {k: v for k, v in cc.inductor_compile_config.items() if isinstance(v, (bool, int, float, str))}


def no_inductor(config) -> str:
    """Why vLLM's ``config`` compiles nothing with Inductor ("" where it does)."""
    from vllm.config.compilation import CompilationMode

    cc = config.compilation_config
    if cc.mode == CompilationMode.NONE or cc.backend != "inductor":
        return f"vLLM's config compiles nothing with Inductor (mode {cc.mode}, backend {cc.backend!r})"
    return ""


def stock_seen_by_inductor(slot: str, config) -> bool:
    """Whether vLLM's ``config`` has Inductor compile ``slot``'s stock call: its native forward (``plan``), or ordinary
    torch code it sees (``SEEN_BY_INDUCTOR``)."""
    if slot in SEEN_BY_INDUCTOR:
        return not no_inductor(config)
    return slot in LAYERS and plan(slot, config).compiles


def plan(slot: str, config=None) -> Plan:
    """Whether vLLM's compiled mode (``config``, default: vLLM's default) runs ``slot`` as its native forward."""
    from vllm.config import set_current_vllm_config

    if slot in KEPT:
        return Plan(False, why=KEPT[slot])
    if slot not in LAYERS:
        return Plan(False, why=f"fk check knows no native forward of vLLM's {slot}: its kernel")
    config = config or default_config()
    cc = config.compilation_config
    settings = _settings(cc)
    why = no_inductor(config)
    if why:
        return Plan(False, why=why, settings=settings)
    module, cls, op, includes = LAYERS[slot]
    importlib.import_module(module)  # registers the op
    from vllm.model_executor.custom_op import op_registry

    with set_current_vllm_config(config):
        enabled = op_registry[op].enabled()
    if enabled:
        return Plan(False, why=f"vLLM's config enables the custom op {op} (custom_ops {cc.custom_ops}): its kernel",
                    settings=settings)
    if slot in IR_OPS:
        priority = getattr(getattr(config, "kernel_config", None), "ir_op_priority", None)  # a vLLM with vllm.ir
        first = getattr(priority, IR_OPS[slot], ["native"])[0]
        if first != "native":
            return Plan(False, why=f"vLLM IR lowers {IR_OPS[slot]} to its {first!r} kernel, not the native one",
                        settings=settings)
    return Plan(True, includes=includes, settings=settings)


@contextlib.contextmanager
def _native_ir():
    """vLLM IR ops traced as the implementation vLLM's config puts first (native, checked by ``plan``), in place of
    the opaque op: what vLLM's lowering pass does on CUDA and its CPU platform sets (``ir_enable_torch_wrap``
    False). A no-op for a vLLM without vllm.ir."""
    try:
        from vllm import ir
    except ImportError:
        yield
        return
    with ir.enable_torch_wrap(False), default_config().kernel_config.ir_op_priority.set_priority():
        yield


def _layer(slot: str, *init):
    from vllm.config import set_current_vllm_config

    module, cls, _, _ = LAYERS[slot]
    with set_current_vllm_config(default_config()):
        return getattr(importlib.import_module(module), cls)(*init)


def _norm(slot: str, weight, eps):
    """RMSNorm's forward_native, the weight each call's own (swapped in outside the graph, as a parameter)."""
    layer = _layer(slot, weight.shape[0], eps, None, True, weight.dtype)
    fn, graphs = compile_native(layer.forward_native, inductor_options(default_config().compilation_config),
                                _native_ir)

    def norm(x, *rest):
        *residual, w, _ = rest
        layer.weight.data = w
        out = fn(x, *residual)
        return out if residual else (out,)

    return Native(norm, qualified(type(layer).forward_native), graphs)


def _gate(slot: str, *init):
    layer = _layer(slot, *init)
    fn, graphs = compile_native(layer.forward_native, inductor_options(default_config().compilation_config),
                                _native_ir)
    return Native(lambda x, *_: (fn(x),), qualified(type(layer).forward_native), graphs)


def _gated_norm(weight, eps, group_size):
    """Mixer2RMSNormGated's forward_native on one rank, the weight each call's own."""
    from vllm.model_executor.layers.mamba.mamba_mixer2 import Mixer2RMSNormGated

    from fk_adapters.engines.vllm.natives import one_rank_gated_norm

    layer = one_rank_gated_norm(weight, eps, group_size)
    fn, graphs = compile_native(layer.forward_native, inductor_options(default_config().compilation_config),
                                _native_ir)

    def gated(x, z, w, *_):
        layer.weight = w
        return (fn(x, z),)

    return Native(gated, qualified(Mixer2RMSNormGated.forward_native), graphs)


def _rotary():
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    fn, graphs = compile_native(RotaryEmbedding.forward_static, inductor_options(default_config().compilation_config),
                                _native_ir)

    def rotary(positions, query, key, head_size, cos_sin_cache, is_neox):
        q, k = fn(positions, query, key, head_size, cos_sin_cache.shape[-1], cos_sin_cache, is_neox)
        return (q,) if k is None else (q, k)

    return Native(rotary, qualified(RotaryEmbedding.forward_static), graphs)


_built: dict[tuple, Native] = {}  # one compiled forward per layer: a new shape reuses or extends its graphs


def _key(slot: str, args: tuple) -> tuple:
    if slot in ("rms_norm", "fused_add_rms_norm"):
        return slot, args[-2].dtype, args[-2].shape[0], args[-1]
    if slot == "gated_rms_norm":
        return slot, args[2].dtype, args[2].shape[0], args[3], args[4]
    return (slot, args[1]) if slot == "gelu_and_mul" else (slot,)


def _new(slot: str, args: tuple) -> Native:
    if slot in ("rms_norm", "fused_add_rms_norm"):
        return _norm(slot, args[-2], args[-1])
    if slot == "silu_and_mul":
        return _gate(slot)
    if slot == "gelu_and_mul":
        return _gate(slot, args[1])
    if slot == "rotary_embedding":
        return _rotary()
    if slot == "gated_rms_norm":
        return _gated_norm(args[2], args[3], args[4])
    raise LookupError(f"vLLM's compiled mode runs {slot}'s kernel: no native forward to compile")


def build(slot: str, args: tuple) -> Native:
    """The slot's native forward from vLLM's code, compiled as vLLM's compiled mode would (the token count
    symbolic), compiled for ``args`` (its first call on them)."""
    key = _key(slot, args)
    if key not in _built:
        _built[key] = _new(slot, args)
    native = _built[key]
    mark_tokens_dynamic(args, TOKEN_ARGS[slot])
    first_call(native, args)
    return native
