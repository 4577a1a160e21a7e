"""What an embedding model needs to run in vLLM's pooling runner (``LLM(runner="pooling")``, ``LLM.embed``; the
driver is ``driver.VllmPoolingDriver``).

vLLM 0.32's pooling API builds a scoring processor that reads its tokenizer's pad id, even for token-id prompts: fk
writes a stand-in tokenizer of the model's vocabulary (``<i>`` is id i; never used to encode, the prompts are ids)
beside a copy of the model's config. One item is one sequence's embedding as vLLM's pooler returns it; the outputs
file holds the correctness batch's, diffed as the transformers host's outputs are.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile


def tokenizer_dir(model_dir: str) -> str:
    """A new temporary folder holding the model's stand-in tokenizer (the caller removes it)."""
    return stand_in_tokenizer(model_dir, tempfile.mkdtemp(prefix="fk-tokenizer-"))


def stand_in_tokenizer(model_dir: str, out_dir: str, cls=None) -> str:
    """A word-level tokenizer whose token ``<i>`` is id i for the model's whole vocabulary, with its special ids;
    ``cls``: the fast tokenizer class to save it as (default PreTrainedTokenizerFast)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    vocab = {f"<{i}>": i for i in range(int(cfg["vocab_size"]))}

    def tok(key, default):
        i = cfg.get(key)
        return f"<{default if i is None or isinstance(i, list) else i}>"

    unk = tok("unk_token_id", 3)
    t = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    (cls or PreTrainedTokenizerFast)(tokenizer_object=t, unk_token=unk, pad_token=tok("pad_token_id", 1),
                            bos_token=tok("bos_token_id", 0), eos_token=tok("eos_token_id", 2)).save_pretrained(out_dir)
    shutil.copy(os.path.join(model_dir, "config.json"), out_dir)  # vLLM reads a tokenizer folder's config too
    return out_dir


def remove(folder: str) -> None:
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
