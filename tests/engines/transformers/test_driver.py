"""The transformers driver's model loading (real transformers, a tiny MoE checkpoint on CPU)."""
import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")


def _tiny_mixtral(tmp_path):
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    cfg = MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2)
    MixtralForCausalLM(cfg).save_pretrained(tmp_path)
    return {"model_dir": str(tmp_path), "architectures": ["MixtralForCausalLM"]}


def test_a_float32_reference_runs_moe_experts_one_by_one(tmp_path):
    import torch

    from fk_adapters.engines.transformers.driver import load_model

    job = _tiny_mixtral(tmp_path)
    ref = load_model({**job, "dtype": "float32"}, "cpu")
    assert ref.config._experts_implementation == "eager"
    stock = load_model({**job, "dtype": "bfloat16"}, "cpu")
    assert stock.config._experts_implementation != "eager"  # an engine-side run keeps transformers' default
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        assert torch.allclose(ref(ids).logits, stock.float()(ids).logits, atol=0.05)
