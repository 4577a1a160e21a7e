"""What a speech model needs to run in vLLM as its transcription path does (``LLM.generate`` with an encoder prompt
carrying the audio and a decoder prompt of token ids; the driver is ``driver.VllmAudioDriver``).

vLLM builds Whisper's inputs with the checkpoint's own processor (feature extractor and tokenizer), read from the
model folder. fk serves a folder of links to the seeded checkpoint's files beside a stand-in processor: the feature
extractor the config implies (its mel bins, 16 kHz, windows of max_source_positions / 50 s: Whisper's 30 s) and a
word-level tokenizer of the vocabulary (never used to encode: the prompts are ids). Each decoder prompt gets its own
seeded clip of noise, the same on every run, so baseline and candidate hear the same audio.
"""
from __future__ import annotations

import json
import os
import tempfile

SAMPLING_RATE = 16000


def model_folder(model_dir: str) -> str:
    """A new temporary folder: the checkpoint's files (linked) and the stand-in processor (the caller removes it)."""
    from transformers import WhisperFeatureExtractor, WhisperProcessor, WhisperTokenizerFast

    from fk_adapters.engines.vllm import pooling

    out = tempfile.mkdtemp(prefix="fk-audio-model-")
    for name in os.listdir(model_dir):
        os.symlink(os.path.join(os.path.abspath(model_dir), name), os.path.join(out, name))
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    tokens = tempfile.mkdtemp(prefix="fk-tokenizer-")
    try:
        tokenizer = WhisperTokenizerFast.from_pretrained(
            pooling.stand_in_tokenizer(model_dir, tokens, WhisperTokenizerFast))
    finally:
        pooling.remove(tokens)
    # a window of 2 x max_source_positions mel frames of 10 ms (Whisper: 3000 frames, 30 s)
    extractor = WhisperFeatureExtractor(feature_size=int(cfg.get("num_mel_bins", 80)), sampling_rate=SAMPLING_RATE,
                                        chunk_length=int(cfg.get("max_source_positions", 1500)) // 50)
    extractor.save_pretrained(out)  # preprocessor_config.json, as a checkpoint has it
    WhisperProcessor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(out)
    return out


def encoder_positions(model_dir: str) -> int:
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        return int(json.load(f).get("max_source_positions", 1500))


def clip(seed: int, index: int, seconds: float):
    """The seeded audio of prompt ``index``: noise at speech level, (samples, sampling rate) as vLLM takes it."""
    import numpy as np

    rng = np.random.default_rng([seed, index])
    return (0.1 * rng.standard_normal(int(seconds * SAMPLING_RATE))).astype(np.float32), SAMPLING_RATE


def requests(prompts: list, seed: int, seconds: float) -> list[dict]:
    """Each decoder prompt (token ids) with its own seeded clip as the encoder's audio."""
    return [{"encoder_prompt": {"prompt_token_ids": [0], "multi_modal_data": {"audio": clip(seed, i, seconds)}},
             "decoder_prompt": {"prompt_token_ids": list(p)}} for i, p in enumerate(prompts)]
