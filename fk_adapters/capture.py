"""``fk capture``: the slot calls an engine makes serving a scenario, as a workload file.

One engine run in capture mode (``FK_CAPTURE=1``): the built-in recorder puts the engine's own
kernel in every slot it hosts (outputs stay stock) and counts every distinct call signature
(``fk_adapters.call_signature``), with the value statistics of its inputs (``fk_adapters.check.value_stats``).
Always eager: under CUDA graphs or torch.compile the op body runs only at capture or trace time, so
the counts would be wrong.
"""
from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from fk_adapters import __version__, op_families, probe
from fk_adapters.check import value_stats
from fk_adapters.engines import EngineSpec
from fk_adapters.engines.loading import CAPTURE_PLUGIN, capture_slots
from fk_adapters.results import Kind, stamp
from fk_adapters.runner.proc import run_job
from fk_adapters.scenarios import Scenario, build_job
from fk_adapters.weights import scenario_checkpoint

MODEL_FIELDS = ("architectures", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size")
MODE_NOTE = ("captured eager (no CUDA graphs, no torch.compile): every call ran the recorder, and batch sizes "
             "are the exact eager ones, not padded to CUDA graph sizes")
PROFILE_NOTE = ("device time of every GPU kernel while the engine served a batch of the scenario's prompts "
                "(eager), summed per kernel name and per op family (fk_adapters.op_families)")
COUNTS_NOTE = ("calls: while serving the scenario's prompts (correctness and performance workloads); "
               "startup_calls: while the engine started (its profiling and warm-up runs); "
               "with --profile, calls include "
               "the profiled batch; "
               "summed over the engine's worker processes")
VALUES_NOTE = (f"value_stats: per floating argument, over the first {value_stats.FIRST} calls of the signature and "
               f"then every {value_stats.EVERY}th (engine start included): mean, std, abs_max, share of exact zeros, "
               "row_rms [min, max] (RMS of each row of the last dimension); fk check draws inputs at these scales")


class CaptureError(RuntimeError):
    """The engine run failed, or it recorded no slot call."""


@dataclass
class CaptureConfig:
    engine: EngineSpec
    device: str
    out_dir: str
    model_cache: str = ""
    timeout_s: float = 1200.0
    quick: bool = False
    command: str = ""
    profile: bool = False  # also profile a few steps: device time per op family
    engine_integrity: dict = field(default_factory=dict)  # engine_integrity.verify(): in every workload file


PROFILE_STEPS = {"requests": 16, "max_tokens": 32}


def capture_job(sc: Scenario, model_dir: str, quick: bool, profile: bool = False, engine: str = "") -> dict:
    """The scenario's job in eager mode; performance workloads once, without warm-up (only shapes count)."""
    job = build_job(sc, model_dir, "eager", quick, engine=engine)
    if "perf" in job:
        job["perf"].update(repeats=1, warmup=0)
    if profile:
        job["profile"] = dict(PROFILE_STEPS)
    return job


def capture_env(cfg: CaptureConfig, sc: Scenario, cache_root: str) -> dict:
    env = cfg.engine.env(cfg.device, os.path.join(cache_root, f"{cfg.engine.name}-cache", "capture"))
    env.update(sc.engine_env)
    env.update({probe.ENV_CAPTURE: "1", "FK_PLUGINS": CAPTURE_PLUGIN, "FK_STRICT": "1"})
    return env


def merge(snapshots: list[dict] | None) -> dict[str, Counter]:
    """{slot: Counter of signature keys} summed over per-process probe snapshots."""
    out: dict[str, Counter] = defaultdict(Counter)
    for snap in snapshots or []:
        for slot, counts in snap.get("signatures", {}).items():
            out[slot].update(counts)
    return out


def rank_calls(snapshots: list[dict] | None) -> dict[str, dict[str, dict[int, int]]]:
    """{slot: {signature key: {tensor-parallel rank: calls}}} over the snapshots that name their rank."""
    out: dict = defaultdict(lambda: defaultdict(dict))
    for snap in snapshots or []:
        if "rank" in snap:
            for slot, counts in snap.get("signatures", {}).items():
                for key, n in counts.items():
                    out[slot][key][snap["rank"]] = out[slot][key].get(snap["rank"], 0) + n
    return out


def slot_entries(final: Counter, at_start: Counter, stats: dict | None = None, ranks: dict | None = None) -> list[dict]:
    """One entry per signature, most called first; ``startup_calls`` only where the engine start made some;
    ``value_stats`` ({argument: summary}, ``fk_adapters.check.value_stats``) where ``stats`` has the signature;
    ``ranks`` ({rank: calls}, engine start included) under tensor parallelism, where ``ranks`` has it."""
    rows = []
    for key, total in final.items():
        row = {"args": json.loads(key), "calls": total - at_start.get(key, 0)}
        if (ranks or {}).get(key):
            row["ranks"] = dict(sorted(ranks[key].items()))
        if at_start.get(key):
            row["startup_calls"] = at_start[key]
        if (stats or {}).get(key):
            row["value_stats"] = {name: value_stats.summarise(raw) for name, raw in stats[key].items()}
        rows.append((key, row))
    rows.sort(key=lambda kr: (-kr[1]["calls"], -kr[1].get("startup_calls", 0), kr[0]))
    return [row for _, row in rows]


def workload(res: dict, sc: Scenario, cfg: CaptureConfig, weights: str) -> dict:
    """The workload file's content from a capture run's result."""
    final, at_start = merge(res.get("probe")), merge(res.get("probe_after_start"))
    hooked = capture_slots(cfg.engine.name)
    stats = value_stats.merge(res.get("probe"))
    per_rank = rank_calls(res.get("probe"))
    slots = {s: slot_entries(final[s], at_start.get(s, Counter()), stats.get(s), per_rank.get(s))
             for s in hooked if final.get(s)}
    not_routed = probe.merged(res.get("probe"), "not_routed")
    out = {**stamp(Kind.CAPTURE), "scenario": sc.name, "engine": cfg.engine.name,
           "engine_version": res.get("engine_version", "?"),
           "device": cfg.device, "dtype": sc.dtype, "mode": "eager", "mode_note": MODE_NOTE,
           "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": cfg.command,
           "fk_version": __version__, "quick": cfg.quick, "weights": weights,
           "model": {k: sc.model[k] for k in MODEL_FIELDS if k in sc.model}, "workers": len(res.get("probe") or []),
           "engine_integrity": cfg.engine_integrity}
    sizes = {p["world_size"] for p in res.get("probe") or [] if "world_size" in p}
    if sizes:  # each worker a rank: its shapes are the sharded ones
        out["tensor_parallel_size"] = max(sizes)
    if res.get("runtime"):  # how the engine says it ran (SGLang): graphs off
        out["runtime"] = res["runtime"]
    if not_routed:  # calls (SGLang) or layers (vLLM) left on the engine's stock path: not in this file
        out["not_routed"] = dict(not_routed)
    kernel_us = op_families.merge_kernel_us(res.get("profile"))
    if kernel_us:  # a profiled batch (--profile, on a GPU): where the device time goes
        out["profile"] = {"steps": PROFILE_STEPS, "note": PROFILE_NOTE, "op_shares": op_families.shares(kernel_us),
                          "kernel_us": dict(sorted(kernel_us.items(), key=lambda kv: -kv[1])),
                          "values_paused": True}  # every driver's profiled step (skeleton.values_paused)
        in_slots = op_families.merge_kernel_us(res.get("profile"), "slot_us")
        if in_slots:  # the device time of kernels launched inside fk's slot calls, per slot
            out["profile"]["slot_us"] = dict(sorted(in_slots.items(), key=lambda kv: -kv[1]))
            out["profile"]["slot_us_from"] = op_families.SLOT_US_FROM
    out["counts_note"] = COUNTS_NOTE
    out["values_note"] = VALUES_NOTE
    out["total_calls"] = {s: sum(e["calls"] for e in slots.get(s, [])) for s in hooked}  # 0: hooked, never called
    out["slots"] = slots
    return out


def record_failure(cfg: CaptureConfig, sc: Scenario, error: str) -> str:
    """``<scenario>/<engine>.failed.json``: that this engine could not serve the scenario, and why."""
    path = os.path.join(cfg.out_dir, sc.name, f"{cfg.engine.name}.failed.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({**stamp(Kind.CAPTURE_FAILURE), "scenario": sc.name, "engine": cfg.engine.name, "device": cfg.device,
                   "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                   "command": cfg.command, "fk_version": __version__, "error": error}, f, indent=1)
    return path


def capture(cfg: CaptureConfig, sc: Scenario, echo=print) -> tuple[str, dict]:
    """Run the scenario in the engine in capture mode; write and return (path, workload)."""
    cache_root = cfg.model_cache or os.path.join(cfg.out_dir, "models")
    model_dir, weights = scenario_checkpoint(sc, cache_root, echo)
    name = cfg.engine.name
    run_dir = os.path.join(cfg.out_dir, sc.name, f"{name}-run")
    job = capture_job(sc, model_dir, cfg.quick, cfg.profile, name)
    res = run_job(cfg.engine.python, cfg.engine.driver_for(sc.family), job, run_dir, capture_env(cfg, sc, cache_root),
                  cfg.timeout_s, echo=lambda m: echo(f"{sc.name} [{name}] {m}"),
                  watch_gpu=cfg.device == "cuda")  # the GPU lock; the watch is kept beside the run (gpu_share.json)
    echo(f"{sc.name} [{name}] {res['status']} in {res['wall_s']:.0f} s")
    if res["status"] != "ok":
        raise CaptureError(f"{sc.name}: the {name} run ended {res['status']}: {res.get('error', '?')} "
                           f"(log: {res['log']})")
    loads = probe.read_loads(run_dir)
    errors = [r["error"] for r in loads if r.get("error")]
    if errors:
        raise CaptureError(f"{sc.name}: the recorder could not be installed in {name}: {errors[0]} (log: {res['log']})")
    wl = workload(res, sc, cfg, weights)
    if not any(wl["total_calls"].values()) and "profile" not in wl:  # a profile still says where the time went
        raise CaptureError(f"{sc.name}: no slot call was recorded in {name} "
                           f"({len(loads)} process(es) installed the recorder; log: {res['log']})")
    path = os.path.join(cfg.out_dir, sc.name, f"{name}.json")
    with open(path, "w") as f:
        json.dump(wl, f, indent=1)
    return path, wl
