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


TINY_MOE = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
            "vocab_size": 128, "num_local_experts": 4, "num_experts_per_tok": 2}


def test_other_architectures_are_built_by_transformers_in_checkpoint_names(tmp_path):
    from safetensors import safe_open

    a, b = tmp_path / "a", tmp_path / "b"
    assert weights.write_checkpoint(TINY_MOE, str(a), 3, "float32") == weights.write_checkpoint(TINY_MOE, str(b), 3, "float32")
    with safe_open(str(a / "model.safetensors"), "pt") as fa, safe_open(str(b / "model.safetensors"), "pt") as fb:
        assert "model.layers.0.block_sparse_moe.experts.3.w2.weight" in fa.keys()  # per expert, as checkpoints are
        for name in fa.keys():
            assert torch.equal(fa.get_tensor(name), fb.get_tensor(name)), name  # same seed, same bytes
        norm = fa.get_tensor("model.layers.0.input_layernorm.weight")
        assert 0.05 < float(norm.std()) < 0.2 and abs(float(norm.mean()) - 1) < 0.1  # not all ones


def test_an_architecture_transformers_lacks_is_one_clear_error(tmp_path):
    with pytest.raises(weights.WeightsError, match="not a class of transformers"):
        weights.write_checkpoint(dict(TINY_MOE, architectures=["NoSuchForCausalLM"]), str(tmp_path), 0, "float32")
