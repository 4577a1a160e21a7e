"""Run one job on vLLM in this process and write its result JSON.

    python -m fk_adapters.engines.vllm.driver JOB.json RESULT.json

The runner starts this in a fresh subprocess per engine run (baseline or candidate).
It knows nothing of A/B: it serves the job's prompts and records tokens, logprobs,
timings and the evidence read from the workers.
"""
from __future__ import annotations

import os
import sys
import time

from fk_adapters.engines.driver_common import main, measure, phase


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


def run(job: dict) -> dict:
    import torch
    import vllm
    from vllm import LLM, SamplingParams

    res: dict = {"engine": "vllm", "engine_version": vllm.__version__, "torch": torch.__version__, "pid": os.getpid()}
    args = dict(job.get("engine_args", {}))
    args.pop("sglang", None)  # SGLang's own arguments
    args.setdefault("enforce_eager", job.get("mode", "eager") == "eager")
    phase("starting engine")
    t0 = time.perf_counter()
    llm = LLM(model=job["model_dir"], skip_tokenizer_init=True, dtype=job["dtype"], seed=job.get("seed", 0),
              worker_extension_cls="fk_adapters.engines.vllm.worker_ext.FkWorkerExtension", **args)
    res["startup_s"] = time.perf_counter() - t0
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
