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
