"""The transformers driver's model loading (real transformers, a tiny MoE checkpoint on CPU)."""
import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed")


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


def test_a_run_out_of_memory_in_its_throughput_phase_keeps_its_correctness(tmp_path, monkeypatch):
    """The driver fills its kept result phase by phase: what correctness measured survives a failed perf phase."""
    import json

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from fk_adapters.engines import driver_common
    from fk_adapters.engines.transformers import driver

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(tmp_path / "m")
    job = {"model_dir": str(tmp_path / "m"), "architectures": ["LlamaForCausalLM"], "dtype": "float32",
           "correctness": {"prompts": [[1, 2, 3, 4]] * 2, "max_tokens": 3, "teacher": [[1, 2, 3, 4, 5]]},
           "perf": {"repeats": 1, "warmup": 1, "throughput": {"w": {"prompts": [[1, 2, 3]], "output_len": 2}}}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    generate = driver._generate

    def out_of_memory_when_timed(model, prompts, n, device, scores=False):
        if not scores:  # the timed generations; correctness asks for scores
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return generate(model, prompts, n, device, scores)

    monkeypatch.setattr(driver, "_generate", out_of_memory_when_timed)
    monkeypatch.setattr(driver_common, "_kept", {"res": None, "path": None})
    monkeypatch.delenv("FK_PLUGINS", raising=False)
    assert driver_common.main(driver.run, [str(tmp_path / "job.json"), str(tmp_path / "result.json")]) == 1
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["status"] == "error" and res["error"].startswith("OutOfMemoryError")
    assert len(res["tokens"]) == 2 and len(res["tokens"][0]) == 3 and len(res["teacher_logprobs"][0]) == 4
    assert res["probe_after_correctness"][0]["pid"] == res["pid"] and "perf" not in res
    assert {"tokens", "teacher_logprobs", "token_top_ids"} <= set(res["kept_from_partial"])
    assert json.loads((tmp_path / driver_common.PARTIAL_FILE).read_text())["tokens"] == res["tokens"]


def test_the_tf32_state_says_what_float32_matmuls_and_convolutions_may_use():
    import torch

    from fk_adapters.engines.transformers.driver import tf32_state

    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    kept = matmul.allow_tf32, cudnn.allow_tf32
    try:
        matmul.allow_tf32, cudnn.allow_tf32 = False, True  # PyTorch's defaults
        assert tf32_state() == "matmul off, cudnn on"
        matmul.allow_tf32, cudnn.allow_tf32 = True, False
        assert tf32_state() == "matmul on, cudnn off"
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = kept
