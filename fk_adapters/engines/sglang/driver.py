"""Run one job on SGLang (``sgl.Engine``) in this process and write its result JSON.

    python -m fk_adapters.engines.sglang.driver JOB.json RESULT.json

Same job and result schema as the vLLM driver: token generation, or an embedding model's vectors (``pooling``).
SGLang runs the model in scheduler subprocesses, so evidence is fetched from them:
``Engine.collective_rpc("fk_probe_dump", out_dir=..., tag=...)`` makes every scheduler write its probe snapshot to
``<out_dir>/probe-<tag>-<pid>.json`` (methods added by our general plugin; a baseline run
without fk plugins has none, so its probe lists are empty). ``out_dir`` is
``$FK_RUN_DIR/probe`` (a temporary directory without it). Kernel names come from SGLang's
own profiler (``Engine.start_profile(output_dir=...)`` / ``stop_profile()``), which writes
one Chrome trace per rank; the driver counts the GPU kernel events in them.
"""
from __future__ import annotations

import glob
import gzip
import json
import os
import re
import sys
import tempfile

from fk_adapters import op_families, probe
from fk_adapters.engines import skeleton
from fk_adapters.engines.driver_common import main, phase

# vLLM-named scenario engine args and their SGLang ServerArgs names (unverified on GPU);
# keys under engine_args["sglang"] are passed to sgl.Engine as they are.
_ARG_MAP = {"max_model_len": "context_length", "max_num_seqs": "max_running_requests",
            "gpu_memory_utilization": "mem_fraction_static", "tensor_parallel_size": "tp_size",
            "pipeline_parallel_size": "pp_size"}


def engine_kwargs(job: dict) -> tuple[dict, list[str]]:
    """sgl.Engine keyword arguments for a job, and the engine args that had no SGLang meaning."""
    args = dict(job.get("engine_args", {}))
    kw = dict(args.pop("sglang", {}) or {})
    ignored = []
    # Same prompts every repeat: the radix (prefix) cache would skip the timed prefills; off unless the scenario asks
    kw.setdefault("disable_radix_cache", not args.pop("enable_prefix_caching", False))
    for k, v in args.items():
        if k in _ARG_MAP:
            kw.setdefault(_ARG_MAP[k], v)
        elif k == "compilation_config" and isinstance(v, dict) and v.get("cudagraph_capture_sizes"):
            kw.setdefault("cuda_graph_bs_decode", list(v["cudagraph_capture_sizes"]))
        else:
            ignored.append(k)
    spec = job.get("speculative")
    if spec:  # ServerArgs' speculative_* (SGLang 0.5.x); a scenario's own engine_args["sglang"] win
        for key, value in speculative_args(spec).items():
            kw.setdefault(key, value)
    if int(kw.get("tp_size") or 1) > 1:  # as vLLM's driver: the fused all-reduce + RMSNorm bypasses both slots
        kw.setdefault("enforce_disable_flashinfer_allreduce_fusion", True)
    # fk sends token ids only: without this SGLang loads a VLM's HF processor, which needs files fk never writes
    kw.setdefault("enable_multimodal", False)
    if job.get("mode", "eager") == "eager":
        kw["disable_cuda_graph"] = True
    kw.update(model_path=job["model_dir"], skip_tokenizer_init=True, dtype=job["dtype"],
              random_seed=job.get("seed", 0))
    return kw, ignored


_SPEC_ARGS = {"num_steps": "speculative_num_steps", "eagle_topk": "speculative_eagle_topk",
              "num_draft_tokens": "speculative_num_draft_tokens", "draft_dir": "speculative_draft_model_path"}


def speculative_args(spec: dict) -> dict:
    """SGLang server args for a job's speculative settings (method "eagle3" is algorithm "EAGLE3")."""
    out = {"speculative_algorithm": spec["method"].upper()}
    out.update({_SPEC_ARGS[k]: v for k, v in spec.items() if k in _SPEC_ARGS})
    return out


def _params(max_new_tokens: int) -> dict:
    return {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True}


def top_ids(steps) -> list[list[int]]:
    """Per generated step, the ids of the TOP_K most likely tokens; entries are (logprob, id, text)."""
    return [skeleton.top_ids((e[0], e[1]) for e in (step or []) if e[0] is not None) for step in steps]


def chosen_logprobs(entries, ids) -> list[float | None]:
    """Logprob of the token at each position; None where SGLang gave none or another token."""
    out = []
    for e, t in zip(entries, ids):
        ok = e is not None and e[0] is not None and int(e[1]) == int(t)
        out.append(float(e[0]) if ok else None)
    return out


def _generate(engine, prompts, max_new_tokens: int, **kw) -> list[dict]:
    outs = engine.generate(input_ids=[list(p) for p in prompts], sampling_params=_params(max_new_tokens), **kw)
    return outs if isinstance(outs, list) else [outs]


def _probe(engine, out_dir: str, tag: str) -> list[dict]:
    from fk_adapters.plugins import any_selected_in_env

    if not any_selected_in_env():
        return []  # stock run: the general plugin added no probe methods
    try:
        engine.collective_rpc("fk_probe_dump", out_dir=out_dir, tag=tag)
    except Exception as exc:
        phase(f"no probe from the schedulers ({type(exc).__name__}: {exc})")
        return []
    return read_probes(out_dir, tag)


def read_probes(out_dir: str, tag: str) -> list[dict]:
    out = []
    for path in sorted(glob.glob(os.path.join(out_dir, f"probe-{tag}-*.json"))):
        with open(path) as f:
            out.append(json.load(f))
    return out


def kernel_counts(trace_dir: str) -> list[dict]:
    """GPU kernel names with counts and device microseconds per Chrome trace file under ``trace_dir`` (SGLang writes
    one per rank, "...-TP-<rank>.trace.json.gz": its ``rank``)."""
    out = []
    for path in sorted(glob.glob(os.path.join(trace_dir, "**", "*.trace.json*"), recursive=True)):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            trace = json.load(f)
        events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
        ks = [evt for evt in events if evt.get("cat") == "kernel" and evt.get("ph") == "X"]
        kernels, kernel_us = op_families.tally((evt["name"], float(evt.get("dur", 0.0))) for evt in ks)
        span = op_families.span_busy((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), e["name"])
                                     for e in ks if "ts" in e)
        rank = re.search(r"-TP-(\d+)", os.path.basename(path))
        slots = op_families.trace_slot_us(events)
        out.append({"trace": os.path.basename(path), **({"rank": int(rank.group(1))} if rank else {}),
                    "kernels": kernels, "kernel_us": kernel_us, **span, **op_families.trace_host_time(events),
                    **({"slot_us": slots} if slots else {})})
    return out


def runtime(sa) -> dict:
    """How this engine runs the model, from its resolved server args."""
    cfg = getattr(sa, "cuda_graph_config", None)
    graphs = ({"decode": cfg.decode.backend, "prefill": cfg.prefill.backend} if cfg is not None
              else {"disabled": bool(getattr(sa, "disable_cuda_graph", False))})
    out = {"cuda_graphs": graphs, "torch_compile": bool(getattr(sa, "enable_torch_compile", False)),
           "attention_backend": getattr(sa, "attention_backend", None)}
    # DeepSeek-V3.2's sparse attention (DSA) picks its kernels, cache dtype and page size by GPU generation
    if out["attention_backend"] == "dsa":
        dsa = ("kv_cache_dtype", "page_size", "dsa_prefill_backend", "dsa_decode_backend")
        out.update({k: getattr(sa, k) for k in dsa if getattr(sa, k, None)})
    if getattr(sa, "speculative_algorithm", None):
        out["speculative"] = {k: getattr(sa, k, None) for k in (
            "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
            "speculative_eagle_topk", "speculative_num_draft_tokens")}
    return out


class SGLangDriver(skeleton.Driver):
    """``sgl.Engine`` in this process; evidence from its scheduler subprocesses (``fk_probe_dump``)."""

    name = "sglang"

    def import_engine(self) -> str:
        import sglang as sgl

        return getattr(sgl, "__version__", "?")

    def prepare(self, job: dict, res: dict) -> None:
        self.run_dir = os.environ.get("FK_RUN_DIR") or tempfile.mkdtemp(prefix="fk-sglang-")
        self.probe_dir = os.path.join(self.run_dir, "probe")
        os.makedirs(self.probe_dir, exist_ok=True)
        self.kw, res["ignored_engine_args"] = engine_kwargs(job)

    def start(self, job: dict, res: dict) -> None:
        import sglang as sgl

        self.engine = sgl.Engine(**self.kw)

    def close(self) -> None:
        self.engine.shutdown()

    def runtime(self) -> dict | None:
        return runtime(self.engine.server_args)

    def probe(self, tag: str) -> list[dict]:
        return _probe(self.engine, self.probe_dir, tag)

    def greedy(self, prompts: list, max_tokens: int) -> tuple[list, list, list]:
        outs = _generate(self.engine, prompts, max_tokens, return_logprob=True, top_logprobs_num=skeleton.TOP_K,
                         logprob_start_len=-1)  # -1: no prompt logprobs (unverified on GPU)
        return ([list(o["output_ids"]) for o in outs],
                [top_ids(o["meta_info"].get("output_top_logprobs") or []) for o in outs],
                [chosen_logprobs(o["meta_info"].get("output_token_logprobs") or [], o["output_ids"]) for o in outs])

    def teacher(self, seqs: list) -> list:
        outs = _generate(self.engine, seqs, 1, return_logprob=True, logprob_start_len=0)
        return [chosen_logprobs((o["meta_info"].get("input_token_logprobs") or [])[1:], seq[1:])
                for o, seq in zip(outs, seqs)]

    def timed(self, prompts: list, output_len: int) -> tuple[float, int, int]:
        dt, outs = self.clocked(_generate, self.engine, prompts, output_len)
        return dt, sum(len(p) for p in prompts), sum(len(o["output_ids"]) for o in outs)

    def profile_steps(self, prompts: list, max_tokens: int) -> list[dict]:
        return self.profiled(_generate, self.engine, prompts, max_tokens)

    def profiled(self, fn, *args) -> list[dict]:
        """The device kernels every scheduler ran during ``fn(*args)``, from SGLang's own profiler's traces."""
        trace_dir = os.path.join(self.run_dir, "profile")
        os.makedirs(trace_dir, exist_ok=True)
        # a capture's slot spans on the device come from its host-side ranges: CPU activity too
        activities = ["CPU", "GPU"] if probe.capturing() else ["GPU"]
        self.engine.start_profile(output_dir=trace_dir, activities=activities, with_stack=False, record_shapes=False)
        self.profiled_call(fn, *args)
        self.engine.stop_profile()
        return kernel_counts(trace_dir)


def encode(engine, seqs: list) -> list[dict]:
    """``Engine.encode`` for token-id sequences: its request object takes ``input_ids`` (the engine runs without a
    tokenizer), which ``encode`` itself does not pass on; one result dict ("embedding": floats) per sequence."""
    from sglang.srt.managers.io_struct import EmbeddingReqInput

    request = EmbeddingReqInput(input_ids=[list(s) for s in seqs])
    out = engine.loop.run_until_complete(engine.tokenizer_manager.generate_request(request, None).__anext__())
    return out if isinstance(out, list) else [out]


class SGLangPoolingDriver(skeleton.Embeddings, SGLangDriver):
    """``sgl.Engine`` serving an embedding model (``is_embedding``): one pooled vector per seeded token-id sequence,
    items/s (SGLang's pooler, e.g. BGE-M3's normalised CLS vector)."""

    def prepare(self, job: dict, res: dict) -> None:
        super().prepare(job, res)
        self.kw["is_embedding"] = True

    def embed(self, seqs: list):
        import torch

        return torch.tensor([o["embedding"] for o in encode(self.engine, seqs)], dtype=torch.float32)


def run(job: dict) -> dict:
    """Token generation, or an embedding model's pooled vectors (a job with ``pooling``)."""
    if job.get("pooling"):
        if job["pooling"].get("task", "embed") != "embed":
            raise ValueError(f"fk's SGLang driver pools one vector per sequence, not {job['pooling']['task']!r}")
        return SGLangPoolingDriver().run(job)
    return SGLangDriver().run(job)


if __name__ == "__main__":
    sys.exit(main(run))
