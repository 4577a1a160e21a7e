import json

import pytest
import torch
from safetensors.torch import load_file

from fk_adapters import scenarios, weights


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-gemma"])
def test_checkpoint_is_seeded_realistic_and_complete(tmp_path, name):
    sc = scenarios.load(name)
    key = weights.write_checkpoint(sc.model, str(tmp_path / "a"), sc.seed, "float32")
    assert weights.write_checkpoint(sc.model, str(tmp_path / "a"), sc.seed, "float32") == key  # reused
    weights.write_checkpoint(sc.model, str(tmp_path / "b"), sc.seed, "float32")
    a, b = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert set(a) == set(weights.parameter_shapes(sc.model))
    assert all(torch.equal(a[k], b[k]) for k in a)  # same seed, same bytes
    emb = a["model.embed_tokens.weight"]
    assert 0.015 < emb.std().item() < 0.025  # not the engines' flat dummy weights
    norm = a["model.norm.weight"]
    assert norm.std().item() > 0.05  # norm weights vary, so a kernel ignoring them shows
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["torch_dtype"] == "float32" and cfg["architectures"] == sc.model["architectures"]
    assert ("lm_head.weight" in a) == (name != "tiny-gemma")
    assert ("model.layers.0.self_attn.q_proj.bias" in a) == (name == "tiny-qwen2")


def test_other_seed_other_weights(tmp_path):
    sc = scenarios.load("tiny-llama")
    weights.write_checkpoint(sc.model, str(tmp_path / "a"), 0, "float32")
    weights.write_checkpoint(sc.model, str(tmp_path / "b"), 1, "float32")
    a, b = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(str(tmp_path / "b" / "model.safetensors"))
    assert not torch.equal(a["model.embed_tokens.weight"], b["model.embed_tokens.weight"])


def test_unknown_architecture():
    with pytest.raises(weights.WeightsError):
        weights.parameter_shapes({"architectures": ["Foo"], "hidden_size": 8})
