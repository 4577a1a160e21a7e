"""A full diffusers pipeline folder from fk's diffusers checkpoint: what ``DiffusionPipeline.from_pretrained`` (and
SGLang's diffusion runtime) loads, for FLUX (FluxPipeline), SDXL (StableDiffusionXLPipeline) and HunyuanVideo-1.5
(HunyuanVideo15Pipeline).

The transformer (or UNet) and ``scheduler/`` are fk's checkpoint, copied file for file. Every other component the
pipeline insists on is tiny and seeded from the scenario's seed (the class's own init, then constant parameters spread
as ``fk_adapters.weights`` does), with the sizes that tie it to the DiT (text widths, latent channels) taken from its
config. Tokenizers are byte-level BPE vocabularies built here with ``tokenizers`` (no hub, no network).
"""
from __future__ import annotations

import json
import os
import shutil

from fk_adapters import weights
from fk_adapters.engines.transformers.libraries import LibraryError, state_dict
from fk_adapters.engines.transformers.libraries.diffusers_loader import SCHEDULER_DIR

PIPELINES = {"FluxTransformer2DModel": "FluxPipeline", "UNet2DConditionModel": "StableDiffusionXLPipeline",
             "HunyuanVideo15Transformer3DModel": "HunyuanVideo15Pipeline"}
NOT_COPIED = ("fk-weights.json",)  # fk's own stamp, not the model's
FAST = ["transformers", "PreTrainedTokenizerFast"]
NONE = [None, None]
CLIP_MAX, T5_MAX = 77, 512  # FLUX's text lengths (FluxPipeline, SGLang's FluxPipelineConfig)
QWEN_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def for_scenario(sc, model_dir: str, out_dir: str) -> str:
    """``write_pipeline_folder`` for a loaded scenario (its [model], seed, dtype and [inputs] guidance)."""
    return write_pipeline_folder(model_dir, out_dir, sc.model, sc.seed, sc.dtype,
                                 guidance_scale=float(sc.inputs.get("guidance_scale", 1.0)))


def write_pipeline_folder(model_dir: str, out_dir: str, config: dict, seed: int, dtype: str = "float32",
                          guidance_scale: float = 1.0) -> str:
    """Write the pipeline folder for fk's checkpoint ``model_dir`` of [model] ``config`` into ``out_dir``; return the
    pipeline's class name. ``guidance_scale`` is HunyuanVideo-1.5's guider's (its call takes none)."""
    pipeline = PIPELINES.get(config["class"])
    if pipeline is None:
        raise LibraryError(f"no pipeline folder for {config['class']} (known: {', '.join(PIPELINES)})")
    os.makedirs(out_dir, exist_ok=True)
    main = "unet" if pipeline == "StableDiffusionXLPipeline" else "transformer"
    _copy_checkpoint(model_dir, out_dir, main)
    writer = {"FluxPipeline": _flux, "StableDiffusionXLPipeline": _sdxl, "HunyuanVideo15Pipeline": _hunyuan15}
    parts = writer[pipeline](config, out_dir, seed, dtype, guidance_scale)
    with open(os.path.join(model_dir, SCHEDULER_DIR, "scheduler_config.json"), encoding="utf-8") as f:
        scheduler = json.load(f)["_class_name"]
    index = {"_class_name": pipeline, "_diffusers_version": _diffusers_version(),
             main: ["diffusers", config["class"]], SCHEDULER_DIR: ["diffusers", scheduler], **parts}
    with open(os.path.join(out_dir, "model_index.json"), "w", encoding="utf-8") as f:
        json.dump(dict(sorted(index.items())), f, indent=2)
    return pipeline


def _diffusers_version() -> str:
    import diffusers

    return diffusers.__version__


def _copy_checkpoint(model_dir: str, out_dir: str, main: str) -> None:
    """fk's model files into ``main/`` and its scheduler into ``scheduler/``, byte for byte (hard links where the
    file system allows)."""
    if not os.path.exists(os.path.join(model_dir, SCHEDULER_DIR, "scheduler_config.json")):
        raise LibraryError(f"{model_dir}: no {SCHEDULER_DIR}/scheduler_config.json ([model.scheduler] in the scenario)")
    for src_dir, dst_dir in ((model_dir, os.path.join(out_dir, main)),
                             (os.path.join(model_dir, SCHEDULER_DIR), os.path.join(out_dir, SCHEDULER_DIR))):
        os.makedirs(dst_dir, exist_ok=True)
        for name in sorted(os.listdir(src_dir)):
            src, dst = os.path.join(src_dir, name), os.path.join(dst_dir, name)
            if name in NOT_COPIED or not os.path.isfile(src):
                continue
            if os.path.exists(dst):
                os.unlink(dst)
            try:
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)


def _seeded(build, seed: int):
    """``build()`` under ``seed`` (the class's own init), its constant parameters spread: the 1-D ones by
    ``spread_constants``, then any other (the video VAE's norm gammas are [C, 1, 1, 1]) by its norm rule."""
    import torch

    model = state_dict.seeded(build, seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            flat = p.reshape(-1)
            if p.ndim > 1 and p.numel() > 1 and bool((flat == flat[0]).all()):
                p.add_((0.1 * torch.randn(p.shape, generator=gen)).to(p.device, p.dtype))
    return model


def _save(model, out_dir: str, name: str, dtype: str) -> None:
    import torch

    torch.nn.Module.to(model, getattr(torch, dtype)).save_pretrained(os.path.join(out_dir, name))


def _heads(width: int, head: int = 64) -> int:
    """Attention heads of ``head`` channels where the width allows, else two (or one)."""
    return width // head if width % head == 0 else 2 if width % 2 == 0 else 1


def _byte_bpe(out_dir: str, name: str, max_length: int, head=(), tail=(), template=None, **special):
    """A byte-level BPE tokenizer (the 256 byte symbols, no merges) with special tokens ``head`` (ids 0..) and
    ``tail`` (after the bytes), ``template`` its post-processor ("<s> $A </s>"), saved as tokenizer.json +
    tokenizer_config.json; returns it and its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    symbols = [*head, *sorted(pre_tokenizers.ByteLevel.alphabet()), *tail]
    vocab = {s: i for i, s in enumerate(symbols)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([*head, *tail])
    if template:
        tok.post_processor = processors.TemplateProcessing(
            single=template, special_tokens=[(s, vocab[s]) for s in template.split() if s in vocab])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=max_length, padding_side="right",
                                   **special)
    fast.save_pretrained(os.path.join(out_dir, name))
    _set_tokenizer_class(os.path.join(out_dir, name))
    return fast, len(vocab)


def _set_tokenizer_class(folder: str) -> None:
    """tokenizer_config.json names PreTrainedTokenizerFast: the class every transformers has (5.x writes
    TokenizersBackend)."""
    path = os.path.join(folder, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)


def _t5(out_dir: str, name: str, d_model: int, vocab: int, seed: int, dtype: str) -> None:
    """A 1-layer T5 v1.1 encoder (gated GELU, as T5-XXL and ByT5) of width ``d_model``: 2 heads of at most 64,
    ``d_ff`` at most 256 (T5's attention width is its own, not d_model)."""
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(vocab_size=vocab, d_model=d_model, d_kv=min(64, max(1, d_model // 2)), d_ff=min(2 * d_model, 256),
                   num_layers=1, num_heads=2, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                   pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    _save(_seeded(lambda: T5EncoderModel(cfg), seed), out_dir, name, dtype)


def _autoencoder_kl(out_dir: str, latent: int, seed: int, dtype: str, **real) -> None:
    """A 4-level AutoencoderKL (vae_scale_factor 8) of ``latent`` channels; ``real`` the checkpoint's scaling."""
    from diffusers import AutoencoderKL

    levels = 4
    _save(_seeded(lambda: AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=latent, block_out_channels=(16, 32, 32, 32),
        down_block_types=("DownEncoderBlock2D",) * levels, up_block_types=("UpDecoderBlock2D",) * levels,
        layers_per_block=1, norm_num_groups=8, sample_size=64, **real), seed), out_dir, "vae", dtype)


def _flux(config: dict, out_dir: str, seed: int, dtype: str, _guidance: float) -> dict:
    """CLIP (width pooled_projection_dim) and T5 (width joint_attention_dim) with their tokenizers, FLUX's VAE."""
    from transformers import CLIPTextConfig, CLIPTextModel

    eos = "<|endoftext|>"
    clip_tok, clip_vocab = _byte_bpe(out_dir, "tokenizer", CLIP_MAX, tail=("<|startoftext|>", eos),
                                     template=f"<|startoftext|> $A {eos}", bos_token="<|startoftext|>",
                                     eos_token=eos, pad_token=eos, unk_token=eos)
    _, t5_vocab = _byte_bpe(out_dir, "tokenizer_2", T5_MAX, head=("<pad>", "</s>", "<unk>"), template="$A </s>",
                            pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    width = int(config["pooled_projection_dim"])
    clip = CLIPTextConfig(vocab_size=clip_vocab, hidden_size=width, intermediate_size=2 * width, projection_dim=width,
                          num_hidden_layers=1, num_attention_heads=_heads(width), max_position_embeddings=CLIP_MAX,
                          hidden_act="quick_gelu", bos_token_id=clip_tok.bos_token_id,
                          eos_token_id=clip_tok.eos_token_id, pad_token_id=clip_tok.pad_token_id)
    _save(_seeded(lambda: CLIPTextModel(clip), seed + 1), out_dir, "text_encoder", dtype)
    # a real checkpoint's names: transformers saves CLIP's without text_model., and SGLang's CLIP loader then finds
    # none of its parameters and runs HF's model, out of its own layers (transformers loads either form alike)
    weights.rename_checkpoint_keys(os.path.join(out_dir, "text_encoder"), ((r"^(?!text_model\.)", "text_model."),))
    _t5(out_dir, "text_encoder_2", int(config["joint_attention_dim"]), t5_vocab, seed + 2, dtype)
    _autoencoder_kl(out_dir, int(config["in_channels"]) // 4, seed + 3, dtype, scaling_factor=0.3611,
                    shift_factor=0.1159, use_quant_conv=False, use_post_quant_conv=False)
    return {"text_encoder": ["transformers", "CLIPTextModel"], "text_encoder_2": ["transformers", "T5EncoderModel"],
            "tokenizer": FAST, "tokenizer_2": FAST, "vae": ["diffusers", "AutoencoderKL"]}


def _sdxl(config: dict, out_dir: str, seed: int, dtype: str, _guidance: float) -> dict:
    """SDXL's VAE only: the encoders, tokenizers and image encoder are optional (the call takes embeddings)."""
    _autoencoder_kl(out_dir, int(config.get("out_channels", config.get("in_channels", 4))), seed + 3, dtype,
                    scaling_factor=0.13025, force_upcast=True)
    return {"text_encoder": NONE, "text_encoder_2": NONE, "tokenizer": NONE, "tokenizer_2": NONE,
            "image_encoder": NONE, "feature_extractor": NONE, "vae": ["diffusers", "AutoencoderKL"],
            "force_zeros_for_empty_prompt": True}


def _hunyuan15(config: dict, out_dir: str, seed: int, dtype: str, guidance: float) -> dict:
    """Qwen2.5-VL text (width text_embed_dim, 2 layers: the pipeline takes the third-last hidden state) with a Qwen
    chat tokenizer, ByT5's T5 (width text_embed_2_dim) and tokenizer, the 16x / 4x video VAE and the CFG guider."""
    from diffusers import AutoencoderKLHunyuanVideo15, ClassifierFreeGuidance
    from transformers import ByT5Tokenizer, Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    end = "<|endoftext|>"
    qwen_tok, qwen_vocab = _byte_bpe(out_dir, "tokenizer", 32768, tail=(end, "<|im_start|>", "<|im_end|>"),
                                     eos_token="<|im_end|>", pad_token=end, chat_template=QWEN_TEMPLATE)
    width = int(config["text_embed_dim"])
    heads = _heads(width, 128)
    half = width // heads // 2  # mrope: temporal, height, width parts of the half head in Qwen2.5-VL's 2:3:3
    t = half // 4
    mrope = [t, (half - t) // 2, half - t - (half - t) // 2]
    qwen = Qwen2_5_VLTextConfig(vocab_size=qwen_vocab, hidden_size=width, intermediate_size=min(2 * width, 256),
                                num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=1,
                                max_position_embeddings=2048, bos_token_id=qwen_tok.convert_tokens_to_ids(end),
                                eos_token_id=qwen_tok.eos_token_id, pad_token_id=qwen_tok.pad_token_id,
                                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                                 "mrope_section": mrope})
    _save(_seeded(lambda: Qwen2_5_VLTextModel(qwen), seed + 1), out_dir, "text_encoder", dtype)
    byt5 = ByT5Tokenizer()
    byt5.save_pretrained(os.path.join(out_dir, "tokenizer_2"))
    _t5(out_dir, "text_encoder_2", int(config["text_embed_2_dim"]), len(byt5), seed + 2, dtype)
    _save(_seeded(lambda: AutoencoderKLHunyuanVideo15(
        latent_channels=int(config["out_channels"]), block_out_channels=(16, 16, 32, 32, 32), layers_per_block=1,
        spatial_compression_ratio=16, temporal_compression_ratio=4), seed + 3), out_dir, "vae", dtype)
    ClassifierFreeGuidance(guidance_scale=guidance).save_pretrained(os.path.join(out_dir, "guider"))
    return {"text_encoder": ["transformers", "Qwen2_5_VLTextModel"], "tokenizer": FAST,
            "text_encoder_2": ["transformers", "T5EncoderModel"], "tokenizer_2": ["transformers", "ByT5Tokenizer"],
            "vae": ["diffusers", "AutoencoderKLHunyuanVideo15"], "guider": ["diffusers", "ClassifierFreeGuidance"]}
