"""SGLang serving an embedding model, without SGLang: the job, the refusals, the driver's embed/correctness/perf."""
import asyncio
import sys
import types

import pytest
import torch
from safetensors.torch import load_file

from fk_adapters import scenarios
from fk_adapters.engines.sglang import driver


def test_bge_m3_runs_in_sglang_as_an_embedding_job():
    sc = scenarios.load("fk46-bge-m3")
    scenarios.check_runnable(sc, "sglang")
    job = scenarios.build_job(sc, "/m", "cuda-graphs", engine="sglang")
    assert job["pooling"]["task"] == "embed" and "correctness" not in job
    assert job == scenarios.build_job(sc, "/m", "cuda-graphs", engine="vllm")  # one job, either engine


def test_a_late_interaction_model_is_refused_in_sglang(tmp_path):
    f = tmp_path / "colbert.toml"
    f.write_text(open(scenarios.load("fk46-colbertv2").path).read()
                 .replace('hosts = ["vllm", "transformers"]', 'hosts = ["vllm", "sglang", "transformers"]'))
    sc = scenarios.load(str(f))
    assert "sglang" in sc.hosts
    with pytest.raises(scenarios.ScenarioError, match="late-interaction"):
        scenarios.check_runnable(sc, "sglang")
    with pytest.raises(ValueError, match="token_embed"):
        driver.run({"pooling": {"task": "token_embed"}})


class _Engine:
    """What ``driver.encode`` reaches: the tokenizer manager's request generator, run on the engine's loop."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.requests = []
        self.tokenizer_manager = self

    async def generate_request(self, request, raw):
        self.requests.append(request.input_ids)
        yield [{"embedding": [float(sum(ids)), float(len(ids))]} for ids in request.input_ids]


@pytest.fixture
def engine(monkeypatch):
    io_struct = types.ModuleType("sglang.srt.managers.io_struct")
    io_struct.EmbeddingReqInput = lambda input_ids: types.SimpleNamespace(input_ids=input_ids)
    monkeypatch.setitem(sys.modules, "sglang.srt.managers.io_struct", io_struct)
    eng = _Engine()
    yield eng
    eng.loop.close()


def test_the_pooling_driver_embeds_token_ids_and_keeps_the_vectors(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("FK_RUN_DIR", str(tmp_path))
    d = driver.SGLangPoolingDriver()
    d.prepare({"model_dir": "/m", "dtype": "bfloat16", "mode": "eager"}, {})
    assert d.kw["is_embedding"] and d.kw["skip_tokenizer_init"]
    d.engine = engine
    seqs = [(1, 2, 3), (4, 5)]
    emb = d.embed(seqs)
    assert emb.dtype == torch.float32 and emb.tolist() == [[6.0, 3.0], [9.0, 2.0]]
    assert engine.requests == [[[1, 2, 3], [4, 5]]]  # token ids, as lists, in one request
    res = {}
    d.correctness({"pooling": {"correctness": seqs}}, res)
    assert res["outputs"] == {"embedding": [2, 2]}
    assert torch.equal(load_file(res["outputs_file"])["embedding"], emb)
    perf = d.perf({"pooling": {"batches": {"batch2": seqs}}, "perf": {"repeats": 1, "warmup": 0, "iters": 2,
                                                                       "batches": [2]}})
    assert [r["items"] for r in perf["throughput"]["batch2"]] == [4] and len(engine.requests) == 1 + 2 + 1 + 1
