"""vLLM's pooling runner without vLLM: the job fk builds for an embedding scenario, the stand-in tokenizer."""
import json

import pytest

from fk_adapters import scenarios
from fk_adapters.engines.vllm import pooling


def test_an_embedding_scenario_gets_seeded_sequences_per_batch_size():
    sc = scenarios.load("tiny-bge-m3")
    scenarios.check_runnable(sc, "vllm")
    job = scenarios.build_job(sc, "/m", "eager", engine="vllm")
    assert "correctness" not in job and job["family"] == "embedding"
    batches = job["pooling"]["batches"]
    assert sorted(batches) == ["batch2", "batch4"] and all(len(s) == 32 for b in batches.values() for s in b)
    assert job["pooling"]["correctness"] == batches["batch2"] and job["perf"]["batches"] == [2, 4]
    assert job == scenarios.build_job(sc, "/m", "eager", engine="vllm")  # the same sequences on every run


def test_an_embedding_scenario_without_a_sequence_length_is_refused_for_vllm(tmp_path):
    f = tmp_path / "x.toml"
    f.write_text(open(scenarios.load("tiny-bge-m3").path).read().replace("seq_len = 32\n", ""))
    with pytest.raises(scenarios.ScenarioError, match="seq_len"):
        scenarios.check_runnable(scenarios.load(str(f)), "vllm")


def test_the_stand_in_tokenizer_maps_token_i_to_id_i_with_the_models_special_ids(tmp_path):
    from transformers import AutoTokenizer

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"vocab_size": 40, "pad_token_id": 1, "bos_token_id": 0,
                                                    "eos_token_id": [2, 5], "model_type": "xlm-roberta"}))
    folder = pooling.tokenizer_dir(str(model))
    try:
        tok = AutoTokenizer.from_pretrained(folder)
        assert tok.pad_token_id == 1 and tok.bos_token_id == 0 and tok.eos_token_id == 2 and len(tok) == 40
        assert tok("<7> <39>", add_special_tokens=False)["input_ids"] == [7, 39]
    finally:
        pooling.remove(folder)


def test_a_late_interaction_model_asks_vllm_for_one_embedding_per_token():
    colbert = scenarios.load("fk46-colbertv2")
    scenarios.check_runnable(colbert, "vllm")
    assert scenarios.build_job(colbert, "/m", "eager", engine="vllm")["pooling"]["task"] == "token_embed"
    bge = scenarios.load("fk46-bge-m3")
    assert scenarios.build_job(bge, "/m", "eager", engine="vllm")["pooling"]["task"] == "embed"
