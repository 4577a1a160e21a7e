"""Run one diffusion job on SGLang's diffusion runtime (``sglang.multimodal_gen``) and write its result JSON.

    python -m fk_adapters.engines.sglang.diffusion_driver JOB.json RESULT.json

``DiffGenerator`` serves the pipeline folder fk writes beside its checkpoint (``diffusers_folder``): FLUX on SGLang's
own pipeline, SDXL and HunyuanVideo-1.5 on its diffusers fallback, which is fed fk's seeded embeddings and latents
(the inputs of the transformers host's loop). Each worker is a spawned process that imports this module again
before it builds the pipeline, so ``diffusion.register()`` below installs fk there. The probe comes back through
fk's scheduler requests, kernel names from SGLang's profiler traces. ``docs/design/sglang-diffusion.md``: the seams,
the first GPU run and what a run of SGLang's diffusion path on a CPU showed (section 7).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import types

from fk_adapters.engines import skeleton
from fk_adapters.engines.driver_common import OUTPUTS_FILE, main, measure_items, phase, save_outputs
from fk_adapters.engines.sglang import diffusion, diffusion_fallback

diffusion.register()  # in the driver and, on their re-import of this module, in every spawned worker
diffusion_fallback.keep_raw_latents()  # there too, plugin or not

NATIVE = {"FluxPipeline": "FLUX.1-dev"}  # pipelines SGLang serves itself: the id its registry knows each by
PROFILER_DIR_VAR = "SGLANG_DIFFUSION_TORCH_PROFILER_DIR"
PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}  # SGLang's names of the job's dtype


def server_kwargs(folder: str, pipeline: str, job: dict) -> dict:
    """``DiffGenerator.from_pretrained`` arguments: one GPU, no offload, no torch.compile, no warm-up, and the
    backend named, so that a pipeline SGLang fails to resolve is an error, not a silent diffusers fallback."""
    p = PRECISION[job["dtype"]]  # SGLang loads a pipeline in bf16 unless told: fk46-sdxl's fp16 inputs then fail
    kw = {"model_path": folder, "num_gpus": 1, "performance_mode": "manual", "dit_cpu_offload": False,
          "text_encoder_cpu_offload": False, "vae_cpu_offload": False, "dit_layerwise_offload": False,
          "enable_torch_compile": False, "warmup": False, "dit_precision": p}
    if pipeline in NATIVE:  # the fallback takes one dtype; its config check refuses per-encoder precisions
        kw.update(backend="sglang", model_id=NATIVE[pipeline], vae_precision=p, text_encoder_precisions=[p, p])
    else:
        kw["backend"] = "diffusers"
    kw.update(job.get("engine_args", {}).get("sglang", {}) or {})
    return kw


def seeded_inputs(job: dict, b: int) -> dict:
    """fk's seeded latents and text embeddings for ``b`` items: the transformers host's loop draws the same ones
    (on the CPU, from the scenario seed), so the fallback pipeline starts where that loop starts."""
    import torch

    from fk_adapters.engines.transformers.libraries import denoising

    with open(os.path.join(job["model_dir"], "config.json"), encoding="utf-8") as f:
        config = types.SimpleNamespace(**json.load(f))
    loop = denoising.LOOPS[job["model"]["class"]]
    stand_in = types.SimpleNamespace(config=config, latent_side=loop.latent_side)
    return loop.inputs(stand_in, job["inputs"], b, torch.Generator().manual_seed(job["seed"]), "cpu",
                       getattr(torch, job["dtype"]))


def fallback_kwargs(pipeline: str, x: dict) -> dict:
    """The diffusers pipeline call's arguments for fk's inputs ``x`` (SGLang merges them last into its call)."""
    import torch

    if pipeline not in ("StableDiffusionXLPipeline", "HunyuanVideo15Pipeline"):
        raise ValueError(f"fk feeds no diffusers fallback for {pipeline}")
    out = {"prompt": None, "negative_prompt": None, "output_type": "latent", "latents": x["latents"],
           "prompt_embeds": x["prompt_embeds"]}
    if pipeline == "StableDiffusionXLPipeline":
        if "text_embeds" in x:
            out["pooled_prompt_embeds"] = x["text_embeds"]
    else:
        out.update(prompt_embeds_mask=x["prompt_mask"], prompt_embeds_2=x["glyph_embeds"],
                   prompt_embeds_mask_2=x["glyph_mask"], negative_prompt_embeds=x["negative_embeds"],
                   negative_prompt_embeds_mask=x["negative_mask"],
                   negative_prompt_embeds_2=torch.zeros_like(x["glyph_embeds"]),
                   negative_prompt_embeds_mask_2=torch.zeros_like(x["glyph_mask"]))
    return out


def request_kwargs(job: dict, pipeline: str, b: int, profile: bool = False) -> dict:
    """``DiffGenerator.generate`` sampling arguments for ``b`` items of the job's [inputs]."""
    spec = job["inputs"]
    if b != 1:  # SGLang 0.5.15 runs the expanded requests as a group, which fails (component_manager.py:189)
        raise ValueError(f"SGLang's diffusion runtime serves one item a request here, not {b}")
    kw = {"prompt": "fk", "seed": job["seed"], "num_outputs_per_prompt": b,
          "num_inference_steps": int(spec.get("steps", 4)), "guidance_scale": float(spec.get("guidance_scale", 1.0)),
          "height": int(spec["height"]), "width": int(spec["width"]), "num_frames": int(spec.get("num_frames", 1)),
          "save_output": False, "return_frames": False,
          # named, so SGLang names no file by hashing the request as JSON (it holds fk's tensors)
          "output_file_name": "fk"}
    if pipeline not in NATIVE:  # FLUX gets no negative prompt: with one SGLang runs true CFG, twice the work
        kw.update(negative_prompt="", diffusers_kwargs=fallback_kwargs(pipeline, seeded_inputs(job, b)))
    if profile:
        # SGLang's profiler steps only in its own denoising stage: the fallback's diffusers call needs all stages
        kw.update(profile=True, **({} if pipeline in NATIVE else {"profile_all_stages": True}))
    return kw


def stacked(results) -> object:
    """The items of ``generate``'s results as one float32 tensor, [items, ...]."""
    import numpy as np
    import torch

    results = results if isinstance(results, list) else [results]
    if not results or any(r is None or r.samples is None for r in results):  # generate logs a worker's error
        raise RuntimeError("SGLang's diffusion runtime returned no samples (the worker's error is in engine.log)")
    return torch.stack([r.samples.detach().float().cpu() if torch.is_tensor(r.samples)
                        else torch.as_tensor(np.asarray(r.samples)).float() for r in results])


class SGLangDiffusionDriver(skeleton.Driver):
    """``DiffGenerator`` in this process; its worker holds the model."""

    name = "sglang"
    profile_phase = "profiling one request"

    def import_engine(self) -> str:
        import sglang

        return getattr(sglang, "__version__", "?")

    def prepare(self, job: dict, res: dict) -> None:
        from fk_adapters.engines.transformers.libraries import diffusers_folder

        self.job, self.requests = job, {}
        self.run_dir = os.environ.get("FK_RUN_DIR") or tempfile.mkdtemp(prefix="fk-sglang-diffusion-")
        self.probe_dir, self.trace_dir = (os.path.join(self.run_dir, d) for d in ("probe", "profile"))
        for d in (self.probe_dir, self.trace_dir):
            os.makedirs(d, exist_ok=True)
        os.environ[PROFILER_DIR_VAR] = self.trace_dir  # the spawned worker inherits both
        os.environ[diffusion_fallback.RAW_LATENTS] = "1"
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        phase("writing the pipeline folder")
        self.folder = os.path.join(self.run_dir, "pipeline")
        self.pipeline = diffusers_folder.write_pipeline_folder(
            job["model_dir"], self.folder, job["model"], job["seed"], job["dtype"],
            guidance_scale=float(job["inputs"].get("guidance_scale", 1.0)))
        self.kw = server_kwargs(self.folder, self.pipeline, job)
        res["pipeline"] = self.pipeline

    def start(self, job: dict, res: dict) -> None:
        from sglang.multimodal_gen import DiffGenerator

        self.gen = DiffGenerator.from_pretrained(**self.kw)

    def close(self) -> None:
        self.gen.shutdown()

    def runtime(self) -> dict | None:
        sa = self.gen.server_args
        return {"pipeline": self.pipeline, "backend": str(getattr(sa, "backend", self.kw["backend"])),
                "attention_backend": getattr(sa, "attention_backend", None), "cuda_graphs": False,
                "torch_compile": bool(getattr(sa, "enable_torch_compile", False))}

    def probe(self, tag: str) -> list[dict]:
        from fk_adapters.engines.sglang.driver import read_probes
        from fk_adapters.plugins import any_selected_in_env

        if not any_selected_in_env():
            return []  # stock run: no fk request handlers in the worker
        from sglang.multimodal_gen.runtime.scheduler_client import sync_scheduler_client

        done = sync_scheduler_client.forward(diffusion.FkProbeDumpReq(out_dir=self.probe_dir, tag=tag))
        if getattr(done, "error", None):  # e.g. "Unknown request type": the worker has no fk handlers
            phase(f"no probe from the diffusion worker ({done.error})")
            return []
        return read_probes(self.probe_dir, tag)

    def items(self, b: int, profile: bool = False):
        key = (b, profile)
        if key not in self.requests:  # drawn once per batch size: no seeding inside the timed calls
            self.requests[key] = request_kwargs(self.job, self.pipeline, b, profile)
        return stacked(self.gen.generate(sampling_params_kwargs=self.requests[key]))

    def correctness(self, job: dict, res: dict) -> None:
        b = int(job.get("correctness_batch", 1))
        phase(f"correctness: one request of {b} item(s), {job['inputs'].get('steps', 4)} steps")
        out = self.items(b)
        res.update(outputs_file=save_outputs({"samples": out}, OUTPUTS_FILE), outputs={"samples": list(out.shape)})

    def perf(self, job: dict) -> dict:
        return measure_items(job["perf"], lambda b: lambda n: self.clocked_calls(n, self.items, b))

    def sync(self) -> None:
        pass  # generate returns once the worker has sent its finished samples back

    def profile_job(self, job: dict) -> list[dict]:
        return self.profiled(self.items, 1, True)

    def profiled(self, fn, *args) -> list[dict]:
        """The worker's device kernels during ``fn(*args)`` (a request with ``profile`` set), from its traces."""
        from fk_adapters.engines.sglang.driver import kernel_counts

        shutil.rmtree(self.trace_dir)  # the warm-up's trace is no part of this step
        os.makedirs(self.trace_dir)
        fn(*args)
        return kernel_counts(self.trace_dir)


def run(job: dict) -> dict:
    return SGLangDiffusionDriver().run(job)


if __name__ == "__main__":
    sys.exit(main(run))
