"""A seeded EAGLE-3 draft head, written next to its target (``<model_dir>/draft``).

The layout is the one of ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``, which vLLM's ``Eagle3LlamaForCausalLM``
(``vllm/model_executor/models/llama_eagle3.py``) and SGLang's ``LlamaForCausalLMEagle3`` load as it is: one
decoder layer ``midlayer.*`` whose q/k/v projections read ``2 * hidden`` (the token's embedding and the fused
hidden state side by side) with an extra ``hidden_norm``; ``fc`` fusing the target's 3 auxiliary hidden states;
``norm``; ``lm_head`` over the draft vocabulary; ``d2t`` (draft id -> target id offset: target = draft + d2t)
and ``t2d`` (a mask of the target ids in the draft vocabulary). No ``embed_tokens``: the engines share the
target's. Matrices ~ N(0, std) and norm weights 1 + N(0, 0.1), as ``fk_adapters.weights`` writes Llama.
"""
from __future__ import annotations

import hashlib
import json
import os

DRAFT_SUBDIR = "draft"
DRAFT_SEED_OFFSET = 7919  # the draft's generator is not the target's


class DraftError(ValueError):
    """A draft head fk cannot write (``fk_adapters.weights`` reports it as a WeightsError)."""


def draft_dir(model_dir: str) -> str:
    return os.path.join(model_dir, DRAFT_SUBDIR)


def eagle3_shapes(config: dict) -> dict[str, tuple[tuple[int, ...], str]]:
    """{tensor name: (shape, kind)}, kind in {linear, norm, d2t, t2d}, in the checkpoint's own names."""
    arch = (config.get("architectures") or [""])[0]
    if "Eagle3" not in arch:
        raise DraftError(f"no draft layout for {arch!r} (EAGLE-3 heads only, e.g. LlamaForCausalLMEagle3)")
    if config.get("num_hidden_layers", 1) != 1:
        raise DraftError("an EAGLE-3 head has one decoder layer (midlayer); num_hidden_layers must be 1")
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    hd = config.get("head_dim") or h // heads
    draft_vocab = config.get("draft_vocab_size") or vocab
    aux = config.get("num_aux_hidden_states") or len(
        (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0])
    p = "midlayer."
    shapes = {
        p + "input_layernorm.weight": ((h,), "norm"),
        p + "hidden_norm.weight": ((h,), "norm"),
        p + "self_attn.q_proj.weight": ((heads * hd, 2 * h), "linear"),
        p + "self_attn.k_proj.weight": ((kv * hd, 2 * h), "linear"),
        p + "self_attn.v_proj.weight": ((kv * hd, 2 * h), "linear"),
        p + "self_attn.o_proj.weight": ((h, heads * hd), "linear"),
        p + "post_attention_layernorm.weight": ((h,), "norm"),
        p + "mlp.gate_proj.weight": ((inter, h), "linear"),
        p + "mlp.up_proj.weight": ((inter, h), "linear"),
        p + "mlp.down_proj.weight": ((h, inter), "linear"),
        "fc.weight": ((h, aux * config.get("target_hidden_size", h)), "linear"),
        "norm.weight": ((h,), "norm"),
        "lm_head.weight": ((draft_vocab, h), "linear"),
    }
    if draft_vocab < vocab:  # with the full vocabulary the engines take no mapping (vLLM refuses one)
        shapes.update({"d2t": ((draft_vocab,), "d2t"), "t2d": ((vocab,), "t2d")})
    return shapes


def write_eagle3(config: dict, out_dir: str, seed: int, dtype: str) -> str:
    """config.json + model.safetensors of a seeded EAGLE-3 head in ``out_dir`` (reused when there); its digest."""
    import torch
    from safetensors.torch import save_file

    cfg = dict(config, torch_dtype=dtype)
    key = hashlib.sha256(json.dumps(["eagle3", cfg, seed], sort_keys=True).encode()).hexdigest()[:16]
    stamp = os.path.join(out_dir, "fk-weights.json")
    if os.path.exists(stamp):
        with open(stamp) as f:
            if json.load(f).get("key") == key:
                return key
    shapes = eagle3_shapes(cfg)
    os.makedirs(out_dir, exist_ok=True)
    std = cfg.get("initializer_range", 0.02)
    gen = torch.Generator().manual_seed(seed + DRAFT_SEED_OFFSET)
    tensors = {}
    for name, (shape, kind) in shapes.items():
        if kind in ("d2t", "t2d"):
            continue
        t = torch.randn(shape, generator=gen, dtype=torch.float32)
        t = 1.0 + 0.1 * t if kind == "norm" else t * std
        tensors[name] = t.to(getattr(torch, dtype)).contiguous()
    if "d2t" in shapes:  # the draft vocabulary: a seeded subset of the target's, in target-id order
        vocab, draft_vocab = shapes["t2d"][0][0], shapes["d2t"][0][0]
        target_ids = torch.randperm(vocab, generator=gen)[:draft_vocab].sort().values
        tensors["d2t"] = (target_ids - torch.arange(draft_vocab)).to(torch.int64)
        t2d = torch.zeros(vocab, dtype=torch.bool)
        t2d[target_ids] = True
        tensors["t2d"] = t2d
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(stamp, "w") as f:
        json.dump({"key": key, "seed": seed, "dtype": dtype, "writer": "eagle3"}, f)
    return key
