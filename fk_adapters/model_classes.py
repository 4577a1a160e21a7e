"""The class that builds a checkpoint's architecture: transformers' own, or one fk defines where the checkpoint's class
is not in transformers. The weights writer seeds and saves with it; the transformers engine loads and serves with it.

fk's own: ColBERTv2 (``HF_ColBERT``), a BERT body and a bias-free linear head to ``dim`` per token, L2-normalised.
It is the checkpoint's own class (``colbert-ir/colbertv2.0``, tensors ``bert.*`` and ``linear.weight``), built here
from transformers' ``BertModel``; its saved config leaves ``dim`` out, as the checkpoint's (the head's width is
``linear.weight``'s: vLLM 0.26-0.32's ColBERTModel fails to build when its config names one).
"""
from __future__ import annotations

import json
import os

import torch


class HFColBERT(torch.nn.Module):
    REVISION = 2  # of what it writes (a seeded checkpoint's cache key): 2, no ``dim`` in the saved config

    def __init__(self, config):
        from transformers import BertModel

        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.linear = torch.nn.Linear(config.hidden_size, int(getattr(config, "dim", 128)), bias=False)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                           token_type_ids=token_type_ids).last_hidden_state
        return {"last_hidden_state": hidden, "embeddings": torch.nn.functional.normalize(self.linear(hidden), dim=-1)}

    @classmethod
    def _from_config(cls, config, dtype=None):
        model = cls(config)
        return model.to(dtype) if dtype is not None else model

    def save_pretrained(self, out_dir: str) -> None:
        from safetensors.torch import save_file

        os.makedirs(out_dir, exist_ok=True)
        cfg = self.config.to_dict()
        cfg["architectures"] = ["HF_ColBERT"]
        cfg.pop("dim", None)  # as the checkpoint's: the head's width is linear.weight's (vLLM reads it from there)
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()},
                  os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})

    @classmethod
    def from_pretrained(cls, model_dir: str, dtype=None):
        from safetensors.torch import load_file
        from transformers import BertConfig

        tensors = load_file(os.path.join(model_dir, "model.safetensors"))
        config = BertConfig.from_pretrained(model_dir)
        if "linear.weight" in tensors:
            config.dim = tensors["linear.weight"].shape[0]
        model = cls._from_config(config, dtype)
        missing, unexpected = model.load_state_dict(tensors, strict=False)
        if missing or unexpected:
            raise ValueError(f"HF_ColBERT checkpoint {model_dir}: missing {missing[:5]}, unexpected {unexpected[:5]}")
        return model


CLASSES = {"HF_ColBERT": HFColBERT}  # checkpoint classes fk builds itself, by architecture name
# checkpoint architecture names that are not a transformers class name -> the transformers class that holds them
ALIASES = {"Qwen2_5OmniModel": "Qwen2_5OmniForConditionalGeneration"}


# installed packages whose import registers their models with transformers (configs in CONFIG_MAPPING, classes in
# the Auto mappings): flash-linear-attention's GLA, RWKV-7, RetNet, ... ({package: its module of model classes})
MODEL_PACKAGES = {"fla": "fla.models"}


def register_model_packages() -> list:
    """Import every installed MODEL_PACKAGES module (their models then load as transformers' own); the modules."""
    import importlib
    import importlib.util

    return [importlib.import_module(mod) for pkg, mod in MODEL_PACKAGES.items() if importlib.util.find_spec(pkg)]


def model_class(arch: str):
    """transformers' class of that name (or of its ALIASES entry), else fk's own (CLASSES), else that of an installed
    MODEL_PACKAGES package, else None."""
    import transformers

    found = getattr(transformers, ALIASES.get(arch, arch), None) or CLASSES.get(arch)
    if found is None:
        found = next((getattr(m, arch) for m in register_model_packages() if hasattr(m, arch)), None)
    return found
