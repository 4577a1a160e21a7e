"""Bridges between the installed vLLM and the installed transformers.

vLLM 0.26's Gemma-4 reads ``config.global_head_dim`` / ``num_global_key_value_heads`` and the global
``config.head_dim``; transformers >= 5.17 moves those into ``per_layer_config`` and refuses the global
read. When the installed vLLM's model does not read ``per_layer_config`` itself, fk hands vLLM an
``hf_overrides`` callable that puts the per-layer values back where that vLLM looks for them.
"""
from __future__ import annotations

import importlib.util

# per-layer attribute -> the global attribute older vLLM models read for full-attention layers
LEGACY_GLOBALS = {"head_dim": "global_head_dim", "num_key_value_heads": "num_global_key_value_heads"}


def _heterogeneous(cfg) -> bool:
    return cfg is not None and vars(cfg).get("_heterogeneity_spec") is not None


def model_reads_per_layer_config(module: str) -> bool:
    """Whether the installed vLLM model module reads ``per_layer_config`` (found by its source, not imported)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return True  # no such model here: nothing to bridge
    with open(spec.origin, encoding="utf-8") as f:
        return "per_layer_config" in f.read()


def restore_legacy_globals(config):
    """``hf_overrides`` callable: per-layer overrides back as the global attributes older vLLM reads."""
    for cfg in (config, getattr(config, "text_config", None)):
        if not _heterogeneous(cfg):
            continue
        per_layer = cfg.per_layer_config
        types = list(cfg._getattr_without_heterogeneous_validation("layer_types") or [])
        full = [i for i, t in enumerate(types) if t == "full_attention"]
        for attr, legacy in LEGACY_GLOBALS.items():
            if full and legacy not in vars(cfg):
                setattr(cfg, legacy, getattr(per_layer[full[0]], attr))
        cfg.allow_global_per_layer_attribute_access = True
    return config


def hf_overrides_for(model_type: str | None):
    """The ``hf_overrides`` the installed vLLM needs for this model type, or None."""
    if model_type in ("gemma4", "gemma4_text") and not model_reads_per_layer_config(
            "vllm.model_executor.models.gemma4"):
        return restore_legacy_globals
    return None


# ----------------------------------------------------------------------------------------------- gemm, fused_moe
# MoE backends (``UnquantizedMoeBackend`` names, 0.26 and 0.32) whose kernel reads w13/w2 as the slot lays them out
# (TRITON: the H100 default) and those that prepack them in place after loading (CPU, modular in 0.32 only: 0.26's
# CPU path is monolithic and stays stock). Any other backend reshuffles or transposes the weights: stock.
MOE_PLAIN_BACKENDS = ("TRITON",)
MOE_PREPACKED_BACKENDS = ("CPU",)
MOE_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "swigluoai")
SWIGLU_DEFAULTS = {"swiglu_alpha": 1.702, "swiglu_limit": 7.0}  # GPT-OSS's, what vLLM's kernels use when unset


def moe_left_stock_why(method) -> str:
    """Why the layers of an ``UnquantizedFusedMoEMethod`` can never route to the slot ("" if they can)."""
    moe, backend = method.moe, method.unquantized_backend.name
    if method.is_monolithic:  # 0.26 CPU, Blackwell FlashInfer TRT-LLM: routing inside the kernel, no forward call
        return f"monolithic {backend} MoE backend: routing inside the engine's kernel"
    if backend not in MOE_PLAIN_BACKENDS + MOE_PREPACKED_BACKENDS:
        return f"MoE backend {backend} keeps the expert weights in its own layout"
    if moe.moe_parallel_config.use_ep:
        return "expert parallel (expert_map)"
    if getattr(moe, "is_lora_enabled", False):
        return "LoRA on the experts"
    if moe.activation.value not in MOE_ACTIVATIONS:
        return f"activation {moe.activation.value}"
    if getattr(moe, "swiglu_beta", None) is not None:
        return "swiglu_beta"
    return ""


def keep_weight_cpu_linear(layer) -> None:
    """vLLM's CPU linear set-up (``UnquantizedLinearMethod.process_weights_after_loading``) that keeps
    ``layer.weight``: stock empties it once its packed handle ``layer.cpu_linear`` exists."""
    import torch
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    if getattr(layer, "_cpu_skip_gemm_dispatch", False):  # 0.32: MLA's kv_b_proj
        layer.cpu_linear = torch.nn.functional.linear
        return
    dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
