"""Install selected plugin kernels into vLLM's CustomOp slots (out-of-tree replacement)."""
from __future__ import annotations

import logging
from typing import NamedTuple

from fk_adapters import safety
from fk_adapters.check import compiled_vllm
from fk_adapters.engines import after_import, install_common, loading
from fk_adapters.engines.vllm import collective, layers, linear_attention
from fk_adapters.engines.vllm.natives import NATIVES
from fk_adapters.kernel import Kernel

log = logging.getLogger("fk_adapters.vllm")


def _rotary_classes():
    """RotaryEmbedding and every subclass that keeps its forward semantics (only the cache differs)."""
    from vllm.model_executor.layers import rotary_embedding as pkg  # imports every variant
    from vllm.model_executor.layers.rotary_embedding.base import RotaryEmbedding

    del pkg
    same = ("forward_native", "forward_cuda", "forward_cpu", "forward", "forward_static")
    out, todo = [], [RotaryEmbedding]
    while todo:
        cls = todo.pop()
        if all(getattr(cls, m, None) is getattr(RotaryEmbedding, m, None) for m in same):
            out.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(set(out), key=lambda c: (c is not RotaryEmbedding, c.__name__))


def _targets(later: bool = True):
    """(in-tree classes, the slots they host, builder of the replacement class); with ``later``, the ``LATER`` hosts
    too, their modules imported now."""
    import importlib

    from vllm.model_executor.layers import linear
    from vllm.model_executor.layers.activation import GeluAndMul, SiluAndMul
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod
    from vllm.model_executor.layers.layernorm import RMSNorm
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    now = [([RMSNorm], ("rms_norm", "fused_add_rms_norm"), layers.rms_norm_class),
           ([SiluAndMul], ("silu_and_mul",), layers.silu_and_mul_class),
           ([GeluAndMul], ("gelu_and_mul",), layers.gelu_and_mul_class),
           (_rotary_classes(), ("rotary_embedding",), layers.rotary_class),
           ([getattr(linear, name) for name in LINEAR_CLASSES], ("gemm",), layers.linear_class),
           ([ParallelLMHead], ("gemm",), layers.lm_head_class),
           ([UnquantizedFusedMoEMethod], ("fused_moe",), layers.moe_method_class)]
    return now + [([getattr(importlib.import_module(module), name)], slots, build)
                  for module, name, slots, build in (LATER if later else ())]


_GDN, _MAMBA2 = "vllm.model_executor.layers.mamba.gdn.", "vllm.model_executor.layers.mamba.mamba_mixer2"
_LA = linear_attention
# (module, class, the slots it hosts, builder): registered when vLLM imports the module, not by the install. Importing
# the linear-attention layers runs flash-linear-attention's device query, which initialises CUDA; in the engine core
# fk's install runs in (forked from fk's driver), vLLM then logs "must use spawn" and would spawn its workers where a
# stock run forks them (session 48's H100 logs). vLLM imports a model's layer modules before it builds one.
LATER = ((_GDN + "qwen_gdn_linear_attn", "QwenGatedDeltaNetAttention", _LA.GDN, _LA.gdn_class),
         (_GDN + "kimi_gdn_linear_attn", "KimiGatedDeltaNetAttention", _LA.GDN, _LA.kda_class),
         (_MAMBA2, "MambaMixer2", _LA.SSD, _LA.mamba2_class),
         (_MAMBA2, "Mixer2RMSNormGated", ("gated_rms_norm",), layers.gated_norm_class))


class _Later(NamedTuple):
    """A ``LATER`` host: its class, by module and name."""
    module: str
    name: str


# registered by runtime class name: subclasses with their own name (0.32's GateLinear router, ...) stay stock
LINEAR_CLASSES = ("ReplicatedLinear", "ColumnParallelLinear", "MergedColumnParallelLinear", "QKVParallelLinear",
                  "RowParallelLinear")


def _guarded(cls, kernels):
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        safety.check(kernels, *engine_modes())
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


def engine_modes() -> tuple[bool, bool]:
    """(compiled, cuda_graphs) of the vLLM config being built (valid while a model is constructed)."""
    from vllm.config import get_cached_compilation_config
    from vllm.config.compilation import CompilationMode, CUDAGraphMode

    cc = get_cached_compilation_config()
    graphs = cc.cudagraph_mode is not None and cc.cudagraph_mode != CUDAGraphMode.NONE
    return cc.mode != CompilationMode.NONE, graphs


def install(chosen: dict[str, tuple[str, Kernel]]) -> dict[str, list[str]]:
    """Register a replacement class for every in-tree class hosting a chosen slot.

    Each replacement checks, when the model builds it, that its kernel is declared safe for the
    engine's mode (compiled, CUDA graphs) and refuses to be built otherwise. Where an in-tree signature
    is not the one the replacement was written for, its layers stay stock (counted, with why); in-tree
    parameters it does not know are noted on the class entered (calls passing them stay stock).
    Returns {slot: [in-tree class names it entered through]}.
    """
    wrapped = install_common.wrap_chosen(chosen, NATIVES)
    own = install_common.engine_own_ops(chosen, NATIVES)
    layers.NATIVE_PATH.clear()
    layers.NATIVE_PATH.update({s: key for s, key in own.items() if s in compiled_vllm.LAYERS
                               or s in compiled_vllm.SEEN_BY_INDUCTOR or s in layers.STOCK_PATH_ALWAYS})
    hosts = [((base, build), slots) for classes, slots, build in _targets(later=False) for base in classes]
    hosts += [((_Later(module, name), build), slots) for module, name, slots, build in LATER]
    own_seams = ("paged_attention", collective.SLOT)
    entered = install_common.enter(chosen, {s: op for s, op in wrapped.items() if s not in own_seams}, hosts,
                                   lambda host, mine: _register(*host, mine, chosen))
    if entered.get("fused_moe"):
        _count_quantized_moe()
    if "paged_attention" in wrapped:
        entered["paged_attention"] = [_register_attention(wrapped["paged_attention"], chosen)]
    if collective.SLOT in wrapped:
        entered[collective.SLOT] = [collective.install(wrapped[collective.SLOT], chosen, engine_modes, log,
                                                         own.get(collective.SLOT, ""))]
    return entered


def _count_quantized_moe() -> None:
    """Register the ``RoutedExperts`` that counts quantized MoE layers as left stock (``layers.quantized_moe_counter``),
    unless a class is registered in its place already (then they go uncounted, and the log says so)."""
    from vllm.model_executor.custom_op import PluggableLayer, op_registry_oot
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod

    if RoutedExperts.__name__ in op_registry_oot:
        log.warning("RoutedExperts already has an out-of-tree replacement: quantized MoE layers are not counted")
        return
    PluggableLayer.register_oot(_decorated_layer_cls=layers.quantized_moe_counter(RoutedExperts,
                                                                                   UnquantizedFusedMoEMethod),
                                name=RoutedExperts.__name__)


def _register_attention(op, chosen: dict) -> str:
    """The attention backend whose impl calls ``op``: in CPU_ATTN's place on a CPU build (which ignores a selected
    backend), else as CUSTOM, which the candidate's driver selects for full-attention layers."""
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    from fk_adapters.engines.vllm import attention

    attention.OPS[attention.SLOT] = op
    attention.CHECK[0] = lambda: safety.check({attention.SLOT: chosen[attention.SLOT]}, *engine_modes())
    cpu = current_platform.is_cpu()
    name = "FkCPUAttentionBackend" if cpu else "FkFlashAttentionBackend"
    register_backend(AttentionBackendEnum.CPU_ATTN if cpu else AttentionBackendEnum.CUSTOM,
                     f"{attention.__name__}.{name}")
    return f"{'CPU_ATTN' if cpu else 'CUSTOM'} attention backend ({name}: the in-tree one, its impl's forward)"


def _register(base, build, mine: dict, chosen: dict) -> str:
    """Register the replacement of in-tree class ``base`` with the ops ``mine``; its entry for the report. A ``_Later``
    host is registered when vLLM imports its module (its entry then gains any drift note in the load record)."""
    from vllm.model_executor.custom_op import CustomOp, PluggableLayer, op_registry_oot

    if isinstance(base, _Later):
        after_import.when_imported(base.module, lambda module: loading.entered_later(
            "vllm", base.name, _register(getattr(module, base.name), build, mine, chosen)))
        return base.name

    if base.__name__ in op_registry_oot:
        raise RuntimeError(f"vLLM class {base.__name__} already has an out-of-tree replacement "
                           f"({op_registry_oot[base.__name__].__qualname__}); refusing to stack another")
    cls = _guarded(build(base, mine), {s: chosen[s] for s in mine})
    cls.__name__ = cls.__qualname__ = f"Fk{base.__name__}"
    drift_of, methods = getattr(cls, "_fk_drift_of", (base, layers.IN_TREE_METHODS))
    cls._fk_drift, note = install_common.checked_drift(cls._fk_params, drift_of, methods, log)
    if getattr(cls, "_fk_pluggable", False):
        PluggableLayer.register_oot(_decorated_layer_cls=cls, name=base.__name__)
    else:
        CustomOp.register_oot(_decorated_op_cls=cls, name=base.__name__)
    return install_common.where(base.__name__, note)
