"""fk's SGLang diffusion driver with the fixes proposed in sglang-diffusion-review.md applied by monkeypatching (the
project's files untouched), to try them together on the CPU through the driver's real job protocol:

    FK_RUN_DIR=... python /work/notes/sglang_diffusion_fixed_driver.py JOB.json RESULT.json

Run as a script, this module is what SGLang's spawned worker re-imports (as __mp_main__): its top level therefore
runs in the worker too, as fk's driver module's does. Each fix is marked F1..F6 as in the review.
"""
import dataclasses
import os
import sys

from fk_adapters.engines.driver_common import main
from fk_adapters.engines.sglang import diffusion_driver as dd

PRECISION = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}  # SGLang's PRECISION_TO_TYPE names


def keep_latents() -> None:
    """F4: the diffusers fallback's latent output as the pipeline returns it: DiffusersExecutionStage's
    _postprocess_output would rescale it ((x + 1) / 2 when outside [-0.5, 1.5]), clamp it to [0, 1] and permute a
    5-D (B, C, T, H, W) latent to (B, T, C, H, W). In every process that imports this module (driver and worker)."""
    from sglang.multimodal_gen.runtime.pipelines.diffusers_pipeline import DiffusersExecutionStage

    DiffusersExecutionStage._postprocess_output = lambda self, output: output.cpu().float()


keep_latents()

_server_kwargs = dd.server_kwargs


def server_kwargs(folder, pipeline, job):
    """F1: the scenario's dtype. The fallback loads the whole diffusers pipeline at dit_precision (SGLang's default
    bf16, whatever fk's inputs are); the native FLUX pipeline also has a VAE and two text encoders to match."""
    p = PRECISION[job["dtype"]]
    extra = {"dit_precision": p}
    if pipeline in dd.NATIVE:
        extra.update(vae_precision=p, text_encoder_precisions=[p, p])  # FLUX: CLIP, T5
    return {**extra, **_server_kwargs(folder, pipeline, job)}  # the scenario's engine_args.sglang still last


_request_kwargs = dd.request_kwargs


def request_kwargs(job, pipeline, b, profile=False):
    kw = _request_kwargs(job, pipeline, b, profile)
    kw["num_outputs_per_prompt"] = 1  # F2: one Req of b rows (fallback) or b Reqs one after another (native)
    if pipeline in dd.NATIVE:
        kw.pop("negative_prompt")  # F3: "" turns on true CFG (2 DiT calls a step) in SGLang's FLUX
    elif profile:
        kw["profile_all_stages"] = True  # F5: the fallback never steps the denoising-step profiler
    return kw


def send(gen, kw):
    """F2/F6: what generate does before its send (diffusion_generator.py:212-246), then the send; the worker's
    error raised here rather than logged and dropped."""
    from sglang.multimodal_gen import SamplingParams
    from sglang.multimodal_gen.runtime.entrypoints.utils import expand_request_outputs, prepare_request
    from sglang.multimodal_gen.runtime.scheduler_client import sync_scheduler_client

    sa = gen.server_args
    sp = SamplingParams.from_user_sampling_params_args(sa.model_path, server_args=sa, **kw)
    sp = dataclasses.replace(sp, prompt=kw["prompt"], output_file_name=kw["output_file_name"])
    sp._set_output_file_name()
    out = sync_scheduler_client.forward(expand_request_outputs(prepare_request(server_args=sa, sampling_params=sp)))
    if out.error:
        raise RuntimeError(f"SGLang's diffusion worker: {out.error}")
    return out.output


class Driver(dd.SGLangDiffusionDriver):
    def items(self, b, profile=False):
        import torch

        key = (b, profile)
        if key not in self.requests:
            self.requests[key] = request_kwargs(self.job, self.pipeline, b, profile)
        kw = self.requests[key]
        if self.pipeline in dd.NATIVE:  # no batched request: b one-item requests, seeds seed .. seed + b - 1
            outs = [send(self.gen, dict(kw, seed=kw["seed"] + i)) for i in range(b)]
            return torch.cat([o.detach().float().cpu() for o in outs])
        return send(self.gen, kw).detach().float().cpu()


dd.server_kwargs, dd.request_kwargs = server_kwargs, request_kwargs

if __name__ == "__main__":
    sys.exit(main(lambda job: Driver().run(job)))
