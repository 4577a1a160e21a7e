"""Run one job on vLLM in this process and write its result JSON.

    python -m fk_adapters.engines.vllm.driver JOB.json RESULT.json

The runner starts this in a fresh subprocess per engine run (baseline or candidate).
It knows nothing of A/B: it serves the job's prompts and records tokens, logprobs,
timings and the evidence read from the workers.
"""
from __future__ import annotations

import json
import os
import sys
import time

from fk_adapters.engines.driver_common import keep, main, measure, phase
from fk_adapters.engines.vllm import compat


def _params(SamplingParams, max_tokens: int, **kw):
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False, **kw)


def _prompts(batch):
    return [{"prompt_token_ids": list(p)} for p in batch]


TOP_K = 5


def _top_ids(step_dicts):
    """Per generated step, the ids of the TOP_K most likely tokens (best first)."""
    out = []
    for d in step_dicts:
        ranked = sorted((d or {}).items(), key=lambda kv: -kv[1].logprob)
        out.append([int(t) for t, _ in ranked[:TOP_K]])
    return out


def _chosen_logprobs(step_dicts, ids):
    """Logprob of the token actually at each position (None where vLLM gave none)."""
    out = []
    for d, t in zip(step_dicts, ids):
        lp = d.get(t) if d else None
        out.append(None if lp is None else float(lp.logprob))
    return out


def engine_args(job: dict) -> dict:
    """``vllm.LLM`` keyword arguments for a job (besides the model, dtype, seed and fk's worker extension)."""
    args = dict(job.get("engine_args", {}))
    args.pop("sglang", None)  # SGLang's own arguments
    args.setdefault("enforce_eager", job.get("mode", "eager") == "eager")
    # Every repeat sends the same prompts: with prefix caching a timed repeat would skip its prefills (FastKernels
    # measures with it off too). A scenario may turn it on in its [engine] table.
    args.setdefault("enable_prefix_caching", False)
    spec = job.get("speculative")
    if spec:  # keys of vLLM's SpeculativeConfig (0.26 and 0.32 alike)
        cfg = {"method": spec["method"], "num_speculative_tokens": spec["num_speculative_tokens"]}
        if spec.get("draft_dir"):
            cfg["model"] = spec["draft_dir"]
        args.setdefault("speculative_config", cfg)
        args.setdefault("disable_log_stats", False)  # LLM.get_metrics() then has the drafts and acceptances
    overrides = compat.hf_overrides_for(_model_type(job.get("model_dir")))
    if overrides is not None:
        args.setdefault("hf_overrides", overrides)
    return args


def _model_type(model_dir: str | None) -> str | None:
    path = os.path.join(model_dir or "", "config.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("model_type")


SPEC_METRICS = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
                "vllm:spec_decode_num_accepted_tokens": "accepted_tokens"}


def speculative_runtime(llm) -> dict:
    """The speculative decoding vLLM resolved, and its counts so far (drafts, draft tokens, accepted tokens)."""
    sc = llm.llm_engine.vllm_config.speculative_config
    if sc is None:
        return {"enabled": False}
    draft = sc.draft_model_config
    out = {"enabled": True, "method": sc.method, "num_speculative_tokens": sc.num_speculative_tokens,
           "draft_model": getattr(draft, "model", None),
           "draft_architectures": list(getattr(draft, "architectures", []))}
    try:
        metrics = llm.get_metrics()
    except Exception as exc:  # stat logging off (a scenario's own disable_log_stats)
        out["acceptance"] = f"unavailable: {type(exc).__name__}: {exc}"
        return out
    counts = {}
    for m in metrics:  # one per engine core: summed
        if m.name in SPEC_METRICS:
            counts[SPEC_METRICS[m.name]] = counts.get(SPEC_METRICS[m.name], 0) + int(m.value)
    per_pos = [m for m in metrics if m.name == "vllm:spec_decode_num_accepted_tokens_per_pos"]
    if per_pos:
        counts["accepted_per_position"] = [int(v) for v in per_pos[0].values]
    out["acceptance"] = counts
    return out


def run(job: dict) -> dict:
    import torch
    import vllm
    from vllm import LLM, SamplingParams

    res = keep({"engine": "vllm", "engine_version": vllm.__version__, "torch": torch.__version__, "pid": os.getpid()})
    args = engine_args(job)
    phase("starting engine")
    t0 = time.perf_counter()
    llm = LLM(model=job["model_dir"], skip_tokenizer_init=True, dtype=job["dtype"], seed=job.get("seed", 0),
              worker_extension_cls="fk_adapters.engines.vllm.worker_ext.FkWorkerExtension", **args)
    res["startup_s"] = time.perf_counter() - t0
    if job.get("speculative"):
        res["runtime"] = {"speculative": speculative_runtime(llm)}
    res["probe_after_start"] = llm.collective_rpc("fk_probe")

    corr = job["correctness"]
    phase("correctness: greedy generation")
    outs = llm.generate(_prompts(corr["prompts"]), _params(SamplingParams, corr["max_tokens"], logprobs=TOP_K),
                        use_tqdm=False)
    res["tokens"] = [list(o.outputs[0].token_ids) for o in outs]
    res["token_top_ids"] = [_top_ids(o.outputs[0].logprobs or []) for o in outs]
    res["token_logprobs"] = [_chosen_logprobs(o.outputs[0].logprobs or [], o.outputs[0].token_ids) for o in outs]
    phase("correctness: teacher-forced logprobs")
    outs = llm.generate(_prompts(corr["teacher"]), _params(SamplingParams, 1, prompt_logprobs=0), use_tqdm=False)
    res["teacher_logprobs"] = [_chosen_logprobs((o.prompt_logprobs or [])[1:], seq[1:])
                               for o, seq in zip(outs, corr["teacher"])]
    res["probe_after_correctness"] = llm.collective_rpc("fk_probe")

    perf = job.get("perf")
    if perf:
        res["perf"] = measure(perf, lambda prompts, n: _timed(llm, _prompts(prompts), _params(SamplingParams, n)))
    if job.get("profile"):
        phase("profiling a few steps")
        llm.collective_rpc("fk_profile_start")
        batch = corr["prompts"][: job["profile"].get("requests", 4)]
        llm.generate(_prompts(batch), _params(SamplingParams, job["profile"].get("max_tokens", 8)), use_tqdm=False)
        res["profile"] = llm.collective_rpc("fk_profile_stop")
    res["probe"] = llm.collective_rpc("fk_probe")
    if job.get("speculative"):  # the counts after every workload
        res["runtime"] = {"speculative": speculative_runtime(llm)}
    res["status"] = "ok"
    return res


def _timed(llm, prompts, params) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    dt = time.perf_counter() - t0
    n_in = sum(len(o.prompt_token_ids) for o in outs)
    n_out = sum(len(o.outputs[0].token_ids) for o in outs)
    return dt, n_in, n_out


if __name__ == "__main__":
    sys.exit(main(run))
