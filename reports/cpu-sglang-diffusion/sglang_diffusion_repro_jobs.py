"""Write fk jobs (as tests/engines/sglang/test_sglang_diffusion_driver.py::_job builds them) and fk's pipeline
folders (diffusers_folder.write_pipeline_folder, as SGLangDiffusionDriver.prepare does) for the scenarios named.

    python sglang_diffusion_repro_jobs.py OUT_DIR tiny-sdxl tiny-hunyuanvideo tiny-flux ...

OUT_DIR/<name>/job.json, OUT_DIR/<name>/ckpt (fk's checkpoint), OUT_DIR/<name>/pipeline (the pipeline folder)."""
import json
import os
import sys

from fk_adapters import scenarios, weights
from fk_adapters.engines.transformers.libraries import diffusers_folder

out = sys.argv[1]
for name in sys.argv[2:]:
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    sc = scenarios.load(name)
    model_dir = os.path.join(d, "ckpt")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        weights.write_checkpoint(sc.model, model_dir, sc.seed, sc.dtype)
    job = dict(scenarios._diffusion_job(sc, model_dir, "compiled", 32), engine_args={})
    folder = os.path.join(d, "pipeline")
    if not os.path.exists(os.path.join(folder, "model_index.json")):
        pipeline = diffusers_folder.write_pipeline_folder(model_dir, folder, job["model"], job["seed"], job["dtype"],
                                                          guidance_scale=float(job["inputs"].get("guidance_scale", 1.0)))
    else:
        pipeline = json.load(open(os.path.join(folder, "model_index.json")))["_class_name"]
    job["_pipeline"], job["_folder"] = pipeline, folder
    with open(os.path.join(d, "job.json"), "w") as f:
        json.dump(job, f, indent=1)
    print(name, pipeline, job["dtype"], job["inputs"], job.get("perf"), job.get("correctness_batch"))
