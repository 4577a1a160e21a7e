"""fk's driver for SGLang's diffusion runtime without SGLang: the server and request arguments it builds, the
diffusers fallback fed fk's own seeded inputs (checked in diffusers: the same step as the transformers host's loop),
and the job protocol end to end on a stand-in ``DiffGenerator`` (samples saved, items/s, the profiled request's
trace read, no probe from a stock run)."""
from __future__ import annotations

import gzip
import importlib.util
import json
import os
import sys
import types

import pytest
import torch

from fk_adapters import scenarios, weights
from fk_adapters.engines.sglang import diffusion_driver as dd

needs_diffusers = pytest.mark.skipif(importlib.util.find_spec("diffusers") is None, reason="diffusers is not installed")


def _job(tmp_path, name: str) -> dict:
    sc = scenarios.load(name)
    model_dir = str(tmp_path / "ckpt")
    weights.write_checkpoint(sc.model, model_dir, sc.seed, sc.dtype)
    return dict(scenarios._diffusion_job(sc, model_dir, "compiled", 32), engine_args={})


def test_flux_is_served_by_sglangs_own_pipeline_and_the_rest_by_its_diffusers_fallback():
    flux = dd.server_kwargs("/p", "FluxPipeline", {"dtype": "bfloat16"})
    assert (flux["backend"], flux["model_id"]) == ("sglang", "FLUX.1-dev")  # a registry miss is an error, not a
    assert (flux["dit_precision"], flux["vae_precision"], flux["text_encoder_precisions"]) == ("bf16", "bf16",
                                                                                               ["bf16", "bf16"])
    sdxl = dd.server_kwargs("/p", "StableDiffusionXLPipeline",
                            {"dtype": "float16", "engine_args": {"sglang": {"num_gpus": 2}}})
    assert sdxl["backend"] == "diffusers" and "model_id" not in sdxl and sdxl["num_gpus"] == 2  # silent fallback
    # the fallback loads the whole pipeline at dit_precision (SGLang's default bf16 failed on fk46-sdxl's fp16
    # inputs); its config check refuses per-encoder precisions
    assert sdxl["dit_precision"] == "fp16" and "text_encoder_precisions" not in sdxl
    for kw in (flux, sdxl):
        assert not (kw["enable_torch_compile"] or kw["warmup"] or kw["dit_cpu_offload"] or kw["vae_cpu_offload"])
    with pytest.raises(ValueError, match="no diffusers fallback"):
        dd.fallback_kwargs("FluxPipeline", {})


def test_flux_asks_for_no_negative_prompt_which_would_turn_on_true_cfg():
    job = {"seed": 7, "inputs": {"steps": 4, "guidance_scale": 3.5, "height": 64, "width": 64}}
    kw = dd.request_kwargs(job, "FluxPipeline", 1, profile=True)
    assert "negative_prompt" not in kw and "diffusers_kwargs" not in kw  # SGLang's own FLUX: its own encoders
    assert kw["profile"] and "profile_all_stages" not in kw  # its denoising stage steps the profiler itself


@needs_diffusers
@pytest.mark.parametrize("name,pipeline", [("tiny-sdxl", "StableDiffusionXLPipeline"),
                                           ("tiny-hunyuanvideo", "HunyuanVideo15Pipeline")])
def test_the_fallback_pipeline_takes_fks_seeded_inputs_and_steps_as_the_hosts_loop(tmp_path, name, pipeline):
    from diffusers import DiffusionPipeline

    from fk_adapters.engines.transformers.libraries import diffusers_folder, diffusers_loader

    job = _job(tmp_path, name)
    job["inputs"] = dict(job["inputs"], steps=1)
    loop = diffusers_loader.load(dict(job, architectures=[job["model"]["class"]]), "cpu")
    x = diffusers_loader.batch(loop, job["inputs"], 1, job["seed"], "cpu", torch.float32)
    mine = dd.seeded_inputs(job, 1)
    assert set(mine) == set(x) and all(torch.equal(mine[k], x[k]) for k in x)  # drawn as the host draws them
    kw = dd.request_kwargs(job, pipeline, 1)
    assert kw["num_outputs_per_prompt"] == 1 and kw["seed"] == job["seed"] and not kw["save_output"]
    assert dd.request_kwargs(job, pipeline, 1, profile=True)["profile_all_stages"]  # else SGLang records no step
    with pytest.raises(ValueError, match="one item a request"):  # SGLang 0.5.15 fails on grouped requests
        dd.request_kwargs(job, pipeline, 2)
    folder = tmp_path / "pipe"
    assert diffusers_folder.write_pipeline_folder(job["model_dir"], str(folder), job["model"], job["seed"],
                                                  job["dtype"], job["inputs"]["guidance_scale"]) == pipeline
    pipe = DiffusionPipeline.from_pretrained(str(folder), torch_dtype=torch.float32, local_files_only=True)
    call = {"height": job["inputs"]["height"], "width": job["inputs"]["width"], "num_inference_steps": 1}
    if pipeline == "StableDiffusionXLPipeline":
        call["guidance_scale"] = job["inputs"]["guidance_scale"]
    else:
        call["num_frames"] = job["inputs"]["num_frames"]
    out = pipe(**kw["diffusers_kwargs"], **call)  # SGLang merges diffusers_kwargs last into this call
    got = out.images if pipeline == "StableDiffusionXLPipeline" else out.frames
    with torch.no_grad():
        torch.testing.assert_close(got, loop(**x)["latents"])


class _Generator:
    """``DiffGenerator`` as the driver uses it: samples from the request's seed; a trace when profiled."""

    calls: list = []

    @classmethod
    def from_pretrained(cls, **kw):
        cls.calls.append(("start", kw))
        return cls()

    server_args = types.SimpleNamespace(backend="diffusers", attention_backend=None, enable_torch_compile=False)

    def generate(self, sampling_params_kwargs):
        kw = sampling_params_kwargs
        if kw.get("output_file_name") is None and isinstance(kw.get("prompt"), str):
            json.dumps(kw)  # SGLang 0.5.15's SamplingParams._set_output_file_name: fails on fk's tensors (s39)
        self.calls.append(("generate", kw))
        if kw.get("profile"):
            trace = {"traceEvents": [{"cat": "kernel", "ph": "X", "name": "fk_triton_gemm_kernel", "ts": 0, "dur": 5}]}
            with gzip.open(os.path.join(os.environ[dd.PROFILER_DIR_VAR], "r1-global-rank0.trace.json.gz"), "wt") as f:
                json.dump(trace, f)
        gen = torch.Generator().manual_seed(kw["seed"])
        return [types.SimpleNamespace(samples=torch.randn(3, 8, 8, generator=gen))
                for _ in range(kw["num_outputs_per_prompt"])]

    def shutdown(self):
        self.calls.append(("shutdown", None))


@needs_diffusers
def test_a_job_runs_through_the_protocol_on_a_stand_in_generator(tmp_path, monkeypatch):
    sglang = types.ModuleType("sglang")
    sglang.__version__ = "0.5.15"
    mg = types.ModuleType("sglang.multimodal_gen")
    mg.DiffGenerator = _Generator
    monkeypatch.setitem(sys.modules, "sglang", sglang)
    monkeypatch.setitem(sys.modules, "sglang.multimodal_gen", mg)
    monkeypatch.setenv("FK_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("FK_PLUGINS", "")
    monkeypatch.chdir(tmp_path)
    _Generator.calls = []
    job = dict(_job(tmp_path, "tiny-sdxl"), profile={"requests": 1})
    job["perf"] = dict(job["perf"], batches=[1])  # one item a request (request_kwargs)
    res = dd.run(job)
    assert res["status"] == "ok" and res["pipeline"] == "StableDiffusionXLPipeline"
    assert res["outputs"] == {"samples": [1, 3, 8, 8]} and os.path.exists(res["outputs_file"])
    assert res["probe"] == [] and res["runtime"]["backend"] == "diffusers"
    assert list(res["perf"]["throughput"]) == ["batch1"]
    sizes = {c[1]["num_outputs_per_prompt"]: c[1]["diffusers_kwargs"]["latents"].shape[0]
             for c in _Generator.calls if c[0] == "generate"}
    assert sizes == {1: 1}  # one request of one item, fk's latents for it
    batch1 = [c[1] for c in _Generator.calls if c[0] == "generate" and c[1]["num_outputs_per_prompt"] == 1
              and not c[1].get("profile")]
    assert len(batch1) > 2 and len({id(kw) for kw in batch1}) == 1  # drawn once, not inside each timed call
    (prof,) = res["profile"]
    assert prof["kernels"] == {"fk_triton_gemm_kernel": 1}  # the profiled request's trace only, not the warm-up's
    kinds = [c[0] for c in _Generator.calls]
    assert kinds[0] == "start" and kinds[-1] == "shutdown"
    start = _Generator.calls[0][1]
    assert start["model_path"] == str(tmp_path / "run" / "pipeline") and start["backend"] == "diffusers"
    assert os.path.exists(tmp_path / "run" / "pipeline" / "model_index.json")


def test_a_worker_without_fks_handlers_gives_no_probe_and_says_why(monkeypatch, tmp_path, capsys):
    unknown = types.SimpleNamespace(error="Unknown request type: FkProbeDumpReq")
    client = types.SimpleNamespace(forward=lambda req: unknown)
    names = ["sglang", "sglang.multimodal_gen", "sglang.multimodal_gen.runtime",
             "sglang.multimodal_gen.runtime.scheduler_client"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules[names[-1]].sync_scheduler_client = client
    monkeypatch.setenv("FK_PLUGINS", "passthrough")
    driver = dd.SGLangDiffusionDriver()
    driver.probe_dir = str(tmp_path)
    assert driver.probe("final") == []
    assert "no probe from the diffusion worker (Unknown request type" in capsys.readouterr().out
