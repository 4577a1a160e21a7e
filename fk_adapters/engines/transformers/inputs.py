"""Seeded inputs for one batch of a non-LLM model, from the scenario's [inputs] table and the model's forward.

The same (spec, batch, seed) gives the same tensors on every run and device (drawn on the CPU). Keys read from
[inputs]: image_size, channels, frames (video), seq_len / text_len / text_prompt_len (text), mel_bins,
audio_seconds and output_len (audio: decoder tokens), max_num_patches (SigLIP-2 NaFlex patches).
"""
from __future__ import annotations

import inspect

import torch


class InputsError(ValueError):
    """The model's forward takes inputs fk cannot build yet."""


def _config_value(config, name: str, default=None):
    for cfg in (config, getattr(config, "text_config", None), getattr(config, "vision_config", None),
                getattr(config, "audio_config", None)):
        value = getattr(cfg, name, None) if cfg is not None else None
        if value is not None:
            return value
    return default


def _pixels(gen, shape, dtype, device):
    return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)


def _ids(gen, vocab: int, b: int, n: int, device):
    return torch.randint(3, int(vocab), (b, n), generator=gen).to(device)


def _naflex(spec: dict, config, b: int, gen, dtype, device) -> dict:
    """SigLIP-2 NaFlex: square images as patch rows [B, patches, C*p*p], all patches valid."""
    p = _config_value(config, "patch_size")
    side = int(spec["image_size"]) // p
    patches = min(side * side, int(spec.get("max_num_patches", side * side)))
    side = int(patches ** 0.5)
    patches = side * side
    c = int(spec.get("channels", _config_value(config, "num_channels", 3)))
    return {"pixel_values": _pixels(gen, (b, patches, c * p * p), dtype, device),
            "pixel_attention_mask": torch.ones(b, patches, dtype=torch.long, device=device),
            "spatial_shapes": torch.tensor([[side, side]] * b, dtype=torch.long, device=device)}


def batch(model, spec: dict, b: int, seed: int, device, dtype) -> dict:
    """Keyword arguments of ``model.forward`` for a batch of ``b`` items."""
    from fk_adapters.engines.transformers.action_loop import ActionLoop

    config, gen = model.config, torch.Generator().manual_seed(seed)
    if isinstance(model, ActionLoop):
        return model.inputs(spec, b, gen, device, dtype)
    params = inspect.signature(model.forward).parameters
    arch = type(model).__name__
    out: dict = {}
    c = int(spec.get("channels", _config_value(config, "num_channels", 3)))
    if "pixel_values_videos" in params and "image_size" in spec:
        s = int(spec["image_size"])
        frames = int(spec.get("frames", _config_value(config, "frames_per_clip", 16)))
        out["pixel_values_videos"] = _pixels(gen, (b, frames, c, s, s), dtype, device)
    elif "input_features" in params:
        mels = int(spec.get("mel_bins", _config_value(config, "num_mel_bins", 80)))
        positions = _config_value(config, "max_source_positions")
        frames = 2 * positions if positions else int(spec.get("audio_seconds", 30)) * 100
        out["input_features"] = _pixels(gen, (b, mels, frames), dtype, device)
        if "decoder_input_ids" in params:
            n = min(int(spec.get("output_len", 4)), _config_value(config, "max_target_positions", 448))
            out["decoder_input_ids"] = _ids(gen, _config_value(config, "vocab_size"), b, n, device)
    elif "pixel_values" in params and "image_size" in spec:
        if "spatial_shapes" in params:
            out.update(_naflex(spec, config, b, gen, dtype, device))
        else:
            s = int(spec["image_size"])
            out["pixel_values"] = _pixels(gen, (b, c, s, s), dtype, device)
    text_len = spec.get("seq_len") or spec.get("text_len") or spec.get("text_prompt_len")
    if "input_ids" in params and text_len:
        vocab = _config_value(config, "vocab_size")
        if not vocab:
            raise InputsError(f"inputs for {arch}: no vocab_size in its config")
        out["input_ids"] = _ids(gen, vocab, b, int(text_len), device)
        if "attention_mask" in params:
            out["attention_mask"] = torch.ones_like(out["input_ids"])
    if not out:
        raise InputsError(f"inputs for {arch} not supported yet (its forward takes {', '.join(params)}; "
                          f"[inputs] gives {', '.join(spec) or 'nothing'})")
    return out
