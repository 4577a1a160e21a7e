"""The client half of DiffGenerator.generate, in this process (no worker): fk's request for each scenario through
SamplingParams.from_user_sampling_params_args / dataclasses.replace / _set_output_file_name / prepare_request /
expand_request_outputs (diffusion_generator.py:193-252), then the pickle that send_pyobj does
(scheduler_client.py:94). fk46 scenarios get a config-only checkpoint (the model built on the meta device) so that
seeded_inputs can draw their real-size inputs; their server args come from the tiny scenario's pipeline folder of
the same class (only model_index.json's _class_name matters to ServerArgs and SamplingParams).

    python sglang_diffusion_repro_client.py            # after sglang_diffusion_repro_jobs.py for the tiny ones
"""
import dataclasses
import json
import os
import pickle
import time
import traceback

import torch

from fk_adapters import scenarios
from fk_adapters.engines.sglang import diffusion_driver as dd

JOBS = os.environ.get("JOBS_DIR", "/tmp/sgrepro")
TINY_FOLDER = {"StableDiffusionXLPipeline": "tiny-sdxl", "HunyuanVideo15Pipeline": "tiny-hunyuanvideo",
               "FluxPipeline": "tiny-flux"}


def fk46_job(name):
    from fk_adapters.engines.transformers.libraries import diffusers_loader

    sc = scenarios.load(name)
    model_dir = os.path.join(JOBS, name, "ckpt-config-only")
    os.makedirs(model_dir, exist_ok=True)
    cls = diffusers_loader.diffusers_class(sc.model["class"])
    with torch.device("meta"):
        model = cls.from_config(diffusers_loader.class_config(sc.model))
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(dict(model.config), f)
    job = dict(scenarios._diffusion_job(sc, model_dir, "compiled", 32), engine_args={})
    pipeline = {"UNet2DConditionModel": "StableDiffusionXLPipeline", "FluxTransformer2DModel": "FluxPipeline",
                "HunyuanVideo15Transformer3DModel": "HunyuanVideo15Pipeline"}[sc.model["class"]]
    job["_pipeline"] = pipeline
    job["_folder"] = os.path.join(JOBS, TINY_FOLDER[pipeline], "pipeline")
    return job


def client(job, b, kw_override=None):
    from sglang.multimodal_gen import SamplingParams
    from sglang.multimodal_gen.runtime.entrypoints.utils import expand_request_outputs, prepare_request
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

    sa = ServerArgs.from_kwargs(**dict(dd.server_kwargs(job["_folder"], job["_pipeline"], job), **(kw_override or {})))
    kw = dd.request_kwargs(job, job["_pipeline"], b, profile=True)
    sp = SamplingParams.from_user_sampling_params_args(sa.model_path, server_args=sa, **kw)
    sp2 = dataclasses.replace(sp, prompt=kw["prompt"], output_file_name=kw.get("output_file_name"), image_path=None)
    sp2._explicit_fields = getattr(sp, "_explicit_fields", set()) | {"prompt", "output_file_name", "image_path"}
    sp2._set_output_file_name()
    req = prepare_request(server_args=sa, sampling_params=sp2)
    reqs = expand_request_outputs(req, num_prompts=1, prompt_index=0)
    t = time.time()
    payload = pickle.dumps(reqs, pickle.DEFAULT_PROTOCOL)  # zmq's send_pyobj
    back = pickle.loads(payload)
    return sa, kw, sp2, reqs, back, len(payload), time.time() - t


def main():
    names = ["tiny-sdxl", "tiny-hunyuanvideo", "tiny-flux", "fk46-sdxl", "fk46-hunyuanvideo-1.5", "fk46-flux.1-dev"]
    for name in names:
        job = fk46_job(name) if name.startswith("fk46") else json.load(open(os.path.join(JOBS, name, "job.json")))
        for b in (1, 2):
            print(f"\n===== {name} b={b} ({job['_pipeline']}, dtype {job['dtype']})", flush=True)
            try:
                sa, kw, sp, reqs, back, size, dt = client(job, b)
            except Exception:
                traceback.print_exc()
                continue
            pc = sa.pipeline_config
            r = reqs[0]
            dk = r.extra.get("diffusers_kwargs") or {}
            print(f"server: {type(pc).__name__} task {pc.task_type.name} data_type {pc.task_type.data_type().name} "
                  f"dit_precision {pc.dit_precision} (job dtype {job['dtype']}); output_path {sa.output_path}")
            print(f"SamplingParams {type(sp).__name__}: num_frames {kw['num_frames']}->{sp.num_frames} "
                  f"height {sp.height} width {sp.width} steps {sp.num_inference_steps} guidance {sp.guidance_scale} "
                  f"negative_prompt {sp.negative_prompt!r} save_output {sp.save_output} "
                  f"return_file_paths_only {sp.return_file_paths_only} output_file_name {sp.output_file_name!r} "
                  f"profile {sp.profile} num_profiled_timesteps {sp.num_profiled_timesteps} "
                  f"profile_all_stages {sp.profile_all_stages} supported_resolutions "
                  f"{'set' if sp.supported_resolutions else None}")
            print(f"Reqs after expand_request_outputs: {len(reqs)}; seeds {[q.seed for q in reqs]}; "
                  f"num_outputs_per_prompt {[q.num_outputs_per_prompt for q in reqs]}; "
                  f"do_classifier_free_guidance {[q.do_classifier_free_guidance for q in reqs]}; "
                  f"same diffusers_kwargs object in every Req: "
                  f"{len({id(q.extra.get('diffusers_kwargs')) for q in reqs}) == 1}")
            if dk:
                print("diffusers_kwargs:", {k: (tuple(v.shape), str(v.dtype)) if torch.is_tensor(v) else v
                                            for k, v in dk.items()})
            print(f"pickled {size / 1e6:.2f} MB in {dt * 1e3:.0f} ms; tensors round-trip equal: "
                  f"{all(torch.equal(a, c) for a, c in zip([v for v in dk.values() if torch.is_tensor(v)], [v for v in (back[0].extra.get('diffusers_kwargs') or {}).values() if torch.is_tensor(v)]))}")
    # the s39 failure, for the record: no output_file_name
    job = json.load(open(os.path.join(JOBS, "tiny-sdxl", "job.json")))
    from sglang.multimodal_gen import SamplingParams
    from sglang.multimodal_gen.runtime.server_args import ServerArgs

    sa = ServerArgs.from_kwargs(**dd.server_kwargs(job["_folder"], job["_pipeline"], job))
    kw = dd.request_kwargs(job, job["_pipeline"], 1)
    kw.pop("output_file_name")
    print("\n===== tiny-sdxl without output_file_name (s39's request)")
    try:
        SamplingParams.from_user_sampling_params_args(sa.model_path, server_args=sa, **kw)
    except Exception:
        traceback.print_exc()


if __name__ == "__main__":
    main()
