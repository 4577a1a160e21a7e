"""One engine process of a run: its environment (compile caches per side and code), its start, and what of its
result the run's rows keep."""
from __future__ import annotations

import hashlib
import json
import os
import time

from fk_adapters import gpu_share, jit_watch, machine, probe
from fk_adapters.engines import EngineSpec
from fk_adapters.runner.config import RunConfig
from fk_adapters.runner.proc import run_job
from fk_adapters.runner.reuse import MACHINE_FILE
from fk_adapters.scenarios import Scenario


def variant(cfg: RunConfig, plugins: list[str]) -> str:
    """The compile-cache folder of one side: the stock engine, or these plugins at this code (fk's and theirs)."""
    if not plugins:
        return "baseline"
    sources = {k: v.get("source_sha256", "") if isinstance(v, dict) else v for k, v in cfg.code.items()}
    digest = hashlib.sha256(json.dumps(sources, sort_keys=True).encode()).hexdigest()[:12]
    return f"{'-'.join(plugins)}-{digest}"


def env(cfg: RunConfig, sc: Scenario, plugins: list[str]) -> dict:
    out = cfg.engine.env(cfg.device, os.path.join(cache_root(cfg), f"{cfg.engine.name}-cache", variant(cfg, plugins)))
    out.update(sc.engine_env)
    out.update(cfg.extra_env)
    if not cfg.multiprocessing:
        out["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    out["FK_PLUGINS"] = ",".join(plugins)
    out["FK_STRICT"] = "1" if cfg.strict else "0"
    return out


def cache_root(cfg: RunConfig) -> str:
    return cfg.model_cache or os.path.join(cfg.out_dir, "models")


def summary(res: dict) -> dict:
    keep = ("status", "error", "engine_version", "torch", "startup_s", "wall_s", "log", "returncode", "reused_from",
            "reused_age_s", "runtime", "gpu_share", "gpu_wait_s", "kept_from_partial", "phases", "cpu_binding",
            "host_cpus", "failed_first")
    out = {k: res[k] for k in keep if k in res}
    if (res.get("perf") or {}).get("timeline"):  # each timed call's start, seconds and host load: to explain a slow one
        out["timeline"] = res["perf"]["timeline"]
    if res.get("status") != "ok":
        out["log_tail"] = res.get("log_tail", "")[-2000:]
    return out


def start(cfg: RunConfig, sc: Scenario, job: dict, run_dir: str, plugins: list, tag: str, echo,
                    engine: EngineSpec | None = None, devices: str = "") -> dict:
    """One process of ``engine`` (default: the run's) on ``job`` with ``plugins`` (none: stock), its progress
    tagged ``[tag]``, on CUDA device set ``devices`` (default: the first of ``--gpus``, else the run's own); its result
    with the plugin loads it recorded."""
    engine = engine or cfg.engine
    devices = devices or (cfg.gpus[0] if cfg.gpus else "")
    environ = env(cfg, sc, plugins) if engine is cfg.engine else dict(engine.env(cfg.device), FK_PLUGINS="")
    if devices:
        environ["CUDA_VISIBLE_DEVICES"] = devices
    environ.update(jit_watch.engine_env(run_dir))
    res = run_job(engine.python, engine.driver_for(sc.family), job, run_dir, environ, cfg.timeout_s,
                  echo=lambda m: echo(f"{sc.name} [{tag}] {m}"), watch_gpu=cfg.device == "cuda")
    res["loads"] = probe.read_loads(run_dir)
    if devices:
        res["devices"] = devices
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, MACHINE_FILE), "w") as f:
        json.dump({"machine": machine.identity(), "finished": time.time()}, f)
    echo(f"{sc.name} [{tag}] {res['status']} in {res['wall_s']:.0f} s")
    share, foreign = res.get("gpu_share"), gpu_share.foreign(res)
    if foreign:
        echo(f"{sc.name} [{tag}] WARNING: {gpu_share.sharing(foreign)}"
             + (": its timings are not comparable" if "perf" in job else ""))
    elif share and not share.get("watched"):
        echo(f"{sc.name} [{tag}] warning: the GPU could not be watched for other processes ({share.get('why')})")
    return res
