"""Run fk's SGLang-diffusion requests through SGLang 0.5.15's real DiffGenerator on a CPU (no GPU needed: SGLang's
CpuPlatform runs the spawned worker, ZMQ scheduler, diffusers fallback and even the native FLUX pipeline).

Set up (see /work/notes/sglang-diffusion-review.md, "How to reproduce"), then e.g.:

    python sglang_diffusion_repro.py tiny-sdxl                         # fk's driver as committed: dtype crash
    python sglang_diffusion_repro.py tiny-sdxl --server '{"dit_precision": "fp32"}' --batches 1,2 --compare
    python sglang_diffusion_repro.py tiny-sdxl --server '{"dit_precision": "fp32"}' --batches 2 --rows-in-one
    python sglang_diffusion_repro.py tiny-sdxl --server '{"dit_precision": "fp32"}' --batches 2 --direct
    python sglang_diffusion_repro.py tiny-flux --req '{"negative_prompt": null}'

JOBS_DIR/<name>/job.json comes from sglang_diffusion_repro_jobs.py (fk's _job + write_pipeline_folder).
--server: extra DiffGenerator.from_pretrained kwargs; --req: request overrides (null removes a key);
--rows-in-one: num_outputs_per_prompt=1 with fk's b-row tensors; --direct: that request sent to the scheduler the way
generate sends it, reading OutputBatch.output itself; --compare: the samples against fk's transformers-host loop;
--profile: profile=True (plus --req for profile_all_stages), and lists the trace files.
"""
import argparse
import glob
import gzip
import json
import os
import time
import traceback

if os.environ.get("REPRO_RAW_LATENTS") == "1":
    # fk's possible fix for the fallback's post-processing, tried here: at module top level, so the spawned worker
    # (which re-imports this module as __mp_main__, as it does fk's driver) installs it too. Keeps the pipeline's
    # latent output as it is (float32 on the CPU) instead of (x + 1) / 2, clamp(0, 1) and the 5-D permute.
    from sglang.multimodal_gen.runtime.pipelines.diffusers_pipeline import DiffusersExecutionStage

    DiffusersExecutionStage._postprocess_output = lambda self, output: output.cpu().float()


def host_latents(job, b):
    """fk's transformers-host loop on the same seeded inputs (tests/engines/sglang/test_sglang_diffusion_driver.py)."""
    import torch

    from fk_adapters.engines.transformers.libraries import diffusers_loader

    loop = diffusers_loader.load(dict(job, architectures=[job["model"]["class"]]), "cpu")
    x = diffusers_loader.batch(loop, job["inputs"], b, job["seed"], "cpu", getattr(torch, job["dtype"]))
    with torch.no_grad():
        return loop(**x)["latents"].float()


def sglang_postprocess(x):
    """DiffusersExecutionStage._postprocess_output (diffusers_pipeline.py:215-235) on a latent batch."""
    import torch

    x = x.cpu().float()
    if x.min().item() < -0.5 or x.max().item() > 1.5:
        x = (x + 1) / 2
    x = x.clamp(0, 1)
    if x.dim() == 5:  # _fix_output_shape: (B, T, C, H, W) -> (B, C, T, H, W), applied to (B, C, T, H, W) latents
        x = x.permute(0, 2, 1, 3, 4)
    return x


def direct(gen, kw):
    """What generate does before and after its send (diffusion_generator.py:193-252), minus the output-count check:
    SamplingParams, Req, the ZMQ send; returns OutputBatch."""
    import dataclasses

    from sglang.multimodal_gen import SamplingParams
    from sglang.multimodal_gen.runtime.entrypoints.utils import expand_request_outputs, prepare_request
    from sglang.multimodal_gen.runtime.scheduler_client import sync_scheduler_client

    sp = SamplingParams.from_user_sampling_params_args(gen.server_args.model_path, server_args=gen.server_args, **kw)
    sp = dataclasses.replace(sp, prompt=kw["prompt"], output_file_name=kw.get("output_file_name"))
    sp._set_output_file_name()
    reqs = expand_request_outputs(prepare_request(server_args=gen.server_args, sampling_params=sp))
    return sync_scheduler_client.forward(reqs)


def run():
    ap = argparse.ArgumentParser()
    ap.add_argument("name")
    ap.add_argument("--jobs", default=os.environ.get("JOBS_DIR", "/tmp/sgrepro"))
    ap.add_argument("--server", default="{}")
    ap.add_argument("--req", default="{}")
    ap.add_argument("--batches", default="1")
    ap.add_argument("--rows-in-one", action="store_true")
    ap.add_argument("--direct", action="store_true")
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()

    import torch

    from fk_adapters.engines.sglang import diffusion_driver as dd

    job = json.load(open(os.path.join(a.jobs, a.name, "job.json")))
    pipeline = job["_pipeline"]
    trace_dir = os.path.join(a.jobs, a.name, "profile")
    os.makedirs(trace_dir, exist_ok=True)
    os.environ[dd.PROFILER_DIR_VAR] = trace_dir
    from sglang.multimodal_gen import DiffGenerator

    kw = dd.server_kwargs(job["_folder"], pipeline, job)
    kw.update(json.loads(a.server))
    print("SERVER KWARGS", {k: v for k, v in kw.items()}, flush=True)
    t = time.time()
    gen = DiffGenerator.from_pretrained(**kw)
    print(f"STARTED in {time.time() - t:.1f}s; pipeline_config {type(gen.server_args.pipeline_config).__name__}",
          flush=True)
    try:
        for b in [int(x) for x in a.batches.split(",")]:
            req = dd.request_kwargs(job, pipeline, b, a.profile)
            if a.rows_in_one:
                req["num_outputs_per_prompt"] = 1
            for k, v in json.loads(a.req).items():
                if v is None:
                    req.pop(k, None)
                else:
                    req[k] = v
            for f in glob.glob(os.path.join(trace_dir, "*")):
                os.remove(f)
            print(f"=== b={b} request keys {sorted(req)} num_outputs_per_prompt={req['num_outputs_per_prompt']}",
                  flush=True)
            t = time.time()
            try:
                if a.direct:
                    ob = direct(gen, req)
                    print(f"DIRECT b={b} error={ob.error!r} output={type(ob.output).__name__} "
                          f"{getattr(ob.output, 'shape', None)} in {time.time() - t:.2f}s", flush=True)
                    out = ob.output
                else:
                    res = gen.generate(sampling_params_kwargs=req)
                    dt = time.time() - t
                    rs = res if isinstance(res, list) else [res]
                    print(f"RESULT b={b} in {dt:.2f}s: {type(res).__name__} " + str(
                        None if res is None else [(type(r.samples).__name__, tuple(r.samples.shape), r.samples.dtype,
                                                   type(r.frames).__name__, r.size) for r in rs]), flush=True)
                    out = dd.stacked(res)
                print(f"STACKED b={b}", tuple(out.shape), out.dtype, float(out.min()), float(out.max()), flush=True)
                if a.compare:
                    ref = host_latents(job, b)
                    if os.environ.get("REPRO_RAW_LATENTS") != "1":
                        ref = sglang_postprocess(ref)
                    same = ref.shape == out.shape
                    print(f"COMPARE b={b}: host latents (post-processed as SGLang does unless REPRO_RAW_LATENTS=1) {tuple(ref.shape)} vs SGLang {tuple(out.shape)}"
                          + (f"; max |diff| {float((ref - out.float()).abs().max()):.3g}, "
                             f"clamped to 0 or 1: {float(((out == 0) | (out == 1)).float().mean()):.1%}" if same
                             else ""), flush=True)
            except Exception:
                traceback.print_exc()
            if a.profile:
                for f in sorted(glob.glob(os.path.join(trace_dir, "*"))):
                    with gzip.open(f, "rt") as fh:
                        ev = json.load(fh).get("traceEvents", [])
                    cats = {}
                    for e in ev:
                        cats[e.get("cat")] = cats.get(e.get("cat"), 0) + 1
                    print("TRACE", os.path.basename(f), len(ev), "events", dict(sorted(cats.items(), key=str)),
                          flush=True)
                print("TRACE FILES", len(glob.glob(os.path.join(trace_dir, "*"))), flush=True)
    finally:
        gen.shutdown()


if __name__ == "__main__":  # the worker is spawned: it re-imports this module
    run()
