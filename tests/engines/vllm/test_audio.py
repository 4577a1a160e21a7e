"""vLLM's transcription path without vLLM: the job fk builds for a speech scenario, the model folder with its
stand-in processor, the seeded clips."""
import json

import numpy as np
import pytest

from fk_adapters import scenarios
from fk_adapters.engines.vllm import audio, pooling


def test_a_speech_scenario_gets_decoder_prompts_that_start_as_whispers_and_its_clip_length():
    sc = scenarios.load("tiny-whisper")
    scenarios.check_runnable(sc, "vllm")
    job = scenarios.build_job(sc, "/m", "eager", engine="vllm")
    assert job["audio"] == {"seconds": 3.0}
    c = job["correctness"]
    prompts = c["prompts"] + c["teacher"] + [p for kind in ("throughput", "latency")
                                             for w in job["perf"][kind].values() for p in w["prompts"]]
    assert {p[0] for p in prompts} == {502} and len({tuple(p) for p in c["prompts"]}) == len(c["prompts"])
    assert job == scenarios.build_job(sc, "/m", "eager", engine="vllm")


@pytest.mark.parametrize("engine", ["sglang"])
def test_an_engine_whose_driver_serves_no_speech_refuses_it(engine):
    sc = scenarios.load("fk46-whisper")
    with pytest.raises(scenarios.ScenarioError,
                       match="audio model: fk.s sglang driver runs llm, embedding, diffusion models"):
        scenarios.check_runnable(sc, engine)


def test_each_prompt_gets_its_own_clip_the_same_on_every_run():
    a, b = audio.requests([[5, 1], [5, 2]], 21, 0.5), audio.requests([[5, 1], [5, 2]], 21, 0.5)
    (x0, sr), (x1, _) = (r["encoder_prompt"]["multi_modal_data"]["audio"] for r in a)
    assert sr == 16000 and x0.shape == (8000,) and x0.dtype == np.float32 and not np.array_equal(x0, x1)
    assert np.array_equal(x0, b[0]["encoder_prompt"]["multi_modal_data"]["audio"][0])
    assert [r["decoder_prompt"]["prompt_token_ids"] for r in a] == [[5, 1], [5, 2]]
    assert not np.array_equal(x0, audio.clip(22, 0, 0.5)[0])  # the scenario's seed decides the audio


def test_the_model_folder_links_the_checkpoint_beside_a_processor_of_its_mel_bins_and_window(tmp_path):
    from transformers import AutoProcessor

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "whisper", "vocab_size": 60, "num_mel_bins": 80,
                                                    "max_source_positions": 200, "pad_token_id": 1}))
    (model / "model.safetensors").write_bytes(b"weights")
    folder = audio.model_folder(str(model))
    try:
        assert (tmp_path / "m" / "model.safetensors").samefile(f"{folder}/model.safetensors")
        proc = AutoProcessor.from_pretrained(folder)
        fe = proc.feature_extractor
        assert (fe.feature_size, fe.sampling_rate, fe.nb_max_frames) == (80, 16000, 400)  # 2 x 200 positions
        assert proc.tokenizer.convert_ids_to_tokens([7, 59]) == ["<7>", "<59>"]  # never encodes: prompts are ids
        assert sorted(p.name for p in model.iterdir()) == ["config.json", "model.safetensors"]  # untouched
    finally:
        pooling.remove(folder)
    assert audio.encoder_positions(str(model)) == 200
