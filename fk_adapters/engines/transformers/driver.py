"""Run one job on HF transformers in this process and write its result JSON.

    python -m fk_adapters.engines.transformers.driver JOB.json RESULT.json

The model is built with ``from_pretrained`` and runs eager (cuda when this process sees a GPU). The selected
plugins are installed into its modules right after it is built, before any forward. LLMs (the job has
``correctness``): greedy tokens and teacher-forced logprobs, as the other engines' drivers give them, and
tokens/s. Other families: one forward on a seeded batch whose floating outputs are saved to
``outputs.safetensors`` for the runner to diff, and items/s. In float16/bfloat16 each side first saves the stock
model's float32 forward of that batch to ``reference.safetensors``, before any plugin is installed (``_reference``):
the baseline's is the truth both sides are judged against; the candidate makes its own so that both processes have
the same history.
"""
from __future__ import annotations

import os
import sys
import time

from fk_adapters import op_families
from fk_adapters.engines.driver_common import checkpoint, keep, main, measure, phase, unfinished_perf

TOP_K = 5
OUTPUTS_FILE = "outputs.safetensors"
REFERENCE_FILE = "reference.safetensors"


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def load_model(job: dict, device: str):
    import torch
    import transformers

    from fk_adapters.engines.transformers.colbert import model_class

    arch = job["architectures"][0]
    cls = model_class(arch)
    if cls is None:
        raise ValueError(f"transformers {transformers.__version__} has no class {arch}")
    return cls.from_pretrained(job["model_dir"], **load_kwargs(cls, job["dtype"])).to(device).eval()


def load_kwargs(cls, dtype: str) -> dict:
    """In float32 (a reference run) MoE experts run one by one: transformers' batched experts
    gather a weight matrix per token, which for a prompt batch outgrows a GPU in float32."""
    import torch

    kw = {"dtype": getattr(torch, dtype)}
    if dtype == "float32" and hasattr(cls, "_can_set_experts_implementation"):
        kw["experts_implementation"] = "eager"
    return kw


def run(job: dict) -> dict:
    import torch
    import transformers

    from fk_adapters import probe
    from fk_adapters.engines.loading import load_and_install
    from fk_adapters.engines.transformers import install
    from fk_adapters.plugins import any_selected_in_env

    transformers.utils.logging.disable_progress_bar()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    res = keep({"engine": "transformers", "engine_version": transformers.__version__, "torch": torch.__version__,
                "pid": os.getpid()})
    phase(f"loading {job['architectures'][0]} on {device}")
    t0 = time.perf_counter()
    model = load_model(job, device)
    startup = time.perf_counter() - t0
    if not probe.capturing() and not job.get("correctness") and job["dtype"] != "float32":
        res.update(_reference(model, job, device))  # the stock model, before any plugin enters it
    t0 = time.perf_counter()
    if any_selected_in_env():  # none selected: stock transformers, no fk code in the model
        load_and_install("transformers", device, lambda chosen: install.install(model, chosen), {})
    res["startup_s"] = startup + time.perf_counter() - t0
    res["runtime"] = {"device": device, "mode": "eager",
                      "attention": getattr(model.config, "_attn_implementation", None) or "?"}
    res["probe_after_start"] = [probe.snapshot()]
    torch.manual_seed(job.get("seed", 0))  # models that draw at forward time (masks, noise) draw alike on both sides
    with torch.inference_mode():
        (_llm if job.get("correctness") else _items)(model, job, device, res)
    res["probe"] = [probe.snapshot()]
    res["status"] = "ok"
    return res


# ----------------------------------------------------------------------------- LLMs

def _generate(model, prompts, n: int, device: str, scores: bool = False):
    import torch

    ids = torch.tensor(prompts, dtype=torch.long, device=device)
    gen = model.generation_config
    pad = gen.pad_token_id if gen.pad_token_id is not None else 0
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, pad_token_id=pad, return_dict_in_generate=True,
                         output_scores=scores, output_logits=scores)
    return ids.shape[1], out


def _llm(model, job: dict, device: str, out: dict) -> None:
    """Correctness, then perf and profile as the job asks, into ``out`` (the driver's kept result)."""
    import torch

    from fk_adapters import probe

    corr = job["correctness"]
    phase("correctness: greedy generation")
    n_in, gen = _generate(model, corr["prompts"], corr["max_tokens"], device, scores=True)
    out["tokens"] = gen.sequences[:, n_in:].tolist()
    steps = len(gen.scores)
    top = torch.stack([s.float().topk(TOP_K, dim=-1).indices for s in gen.scores], dim=1)  # [B, steps, k]
    out["token_top_ids"] = top.tolist()
    lp = torch.stack([torch.log_softmax(x.float(), dim=-1) for x in gen.logits], dim=1)  # raw logits, [B, steps, V]
    chosen = gen.sequences[:, n_in:n_in + steps]
    out["token_logprobs"] = lp.gather(-1, chosen[..., None]).squeeze(-1).tolist()
    phase("correctness: teacher-forced logprobs")
    seqs = torch.tensor(corr["teacher"], dtype=torch.long, device=device)
    lp = torch.log_softmax(model(seqs).logits.float(), dim=-1)
    out["teacher_logprobs"] = lp[:, :-1].gather(-1, seqs[:, 1:, None]).squeeze(-1).tolist()
    out["probe_after_correctness"] = [probe.snapshot()]

    def timed(prompts, n):
        _sync(device)
        t0 = time.perf_counter()
        n_in, gen = _generate(model, prompts, n, device)
        _sync(device)
        dt = time.perf_counter() - t0
        return dt, len(prompts) * n_in, gen.sequences[:, n_in:].numel()

    if job.get("perf"):
        out["perf"] = measure(job["perf"], timed)
    if job.get("profile"):
        phase("profiling a batch")
        p = job["profile"]
        out["profile"] = _profile(lambda: _generate(model, corr["prompts"][: p.get("requests", 4)],
                                                    p.get("max_tokens", 8), device), device)


# ----------------------------------------------------------------------------- other families

def _flatten(obj, name: str, into: dict) -> None:
    """Every floating tensor in a model output (ModelOutput, dicts, tuples), under dotted names."""
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point():
            into[name] = obj.detach().cpu().contiguous().clone()
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{name}.{k}" if name else str(k), into)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _flatten(v, f"{name}.{i}" if name else str(i), into)


def _outputs(model, x: dict) -> dict:
    tensors: dict = {}
    _flatten(model(**x), "", tensors)
    if not tensors:
        raise ValueError(f"{type(model).__name__} returned no floating tensor to compare")
    return tensors


def _save(tensors: dict, name: str) -> str:
    from safetensors.torch import save_file

    path = os.path.abspath(os.path.join(os.environ.get("FK_RUN_DIR") or os.getcwd(), name))
    save_file(tensors, path)
    return path


def _correctness_batch(model, job: dict, device: str) -> dict:
    import torch

    from fk_adapters.engines.transformers import inputs

    return inputs.batch(model, job["inputs"], job["correctness_batch"], job.get("seed", 0), device,
                        getattr(torch, job["dtype"]))


def upcast(model, dtype, done: dict) -> None:
    """Every parameter and buffer of ``dtype`` to float32, in place; ``done`` records each one for ``downcast``."""
    import torch

    with torch.no_grad():
        for m in model.modules():
            for table, is_param in ((m._parameters, True), (m._buffers, False)):
                for name, t in table.items():
                    if t is not None and t.dtype == dtype:
                        if is_param:
                            t.data = t.data.float()
                        else:
                            table[name] = t.float()
                        done[(m, name, is_param)] = dtype


def downcast(done: dict) -> None:
    """Undo ``upcast``: float32 back to bf16/fp16 is exact for values that came from there."""
    import torch

    with torch.no_grad():
        for (m, name, is_param), dtype in done.items():
            if is_param:
                m._parameters[name].data = m._parameters[name].data.to(dtype)
            else:
                m._buffers[name] = m._buffers[name].to(dtype)


def _reference(model, job: dict, device: str) -> dict:
    """The stock model's float32 forward of the correctness batch (the job dtype's inputs, upcast), saved to
    ``reference.safetensors``. The model is upcast in place, run without TF32, and cast back bit for bit; on a GPU
    its float32 weights need twice the job dtype's memory meanwhile (28 GB for a 7B model). A failure (out of memory,
    say) is recorded as ``reference_error`` and the run goes on: the runner then falls back to fixed thresholds."""
    import torch

    phase("correctness: float32 reference forward of the stock model")
    t0 = time.perf_counter()
    x = {k: v.float() if v.is_floating_point() else v for k, v in _correctness_batch(model, job, device).items()}
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    done: dict = {}
    try:
        upcast(model, getattr(torch, job["dtype"]), done)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        torch.manual_seed(job.get("seed", 0))
        with torch.inference_mode():
            out = {"reference_file": _save(_outputs(model, x), REFERENCE_FILE)}
    except Exception as exc:  # noqa: BLE001 - the run goes on without a reference
        out = {"reference_error": f"{type(exc).__name__}: {exc}"[:500]}
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        downcast(done)
        if device == "cuda":
            torch.cuda.empty_cache()
    out["reference_s"] = time.perf_counter() - t0
    return out


def _items(model, job: dict, device: str, out: dict) -> None:
    """The seeded forward's outputs, then perf and profile as the job asks, into ``out`` (the driver's kept result)."""
    import torch

    from fk_adapters import probe

    spec, seed, dtype = job["inputs"], job.get("seed", 0), getattr(torch, job["dtype"])
    phase(f"correctness: one forward on a seeded batch of {job['correctness_batch']}")
    x = _correctness_batch(model, job, device)
    tensors = _outputs(model, x)
    out.update(outputs_file=_save(tensors, OUTPUTS_FILE), outputs={k: list(v.shape) for k, v in tensors.items()},
               probe_after_correctness=[probe.snapshot()])
    perf = job.get("perf")
    if perf:
        out["perf"] = _items_perf(model, spec, seed, perf, device, dtype)
    if job.get("profile"):
        phase("profiling a batch")
        out["profile"] = _profile(lambda: model(**x), device)


def _items_perf(model, spec: dict, seed: int, perf: dict, device: str, dtype) -> dict:
    """Per batch size: items/s over ``iters`` forwards per repeat, and the latency of one forward."""
    from fk_adapters.engines.transformers import inputs

    reps, warm, iters = perf.get("repeats", 3), perf.get("warmup", 1), perf.get("iters", 8)

    def forwards(x, n: int) -> float:
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(n):
            model(**x)
        _sync(device)
        return time.perf_counter() - t0

    with unfinished_perf() as out:
        for b in perf["batches"]:
            x = inputs.batch(model, spec, b, seed, device, dtype)
            for _ in range(warm):
                forwards(x, 1)
            rows = []
            for i in range(reps):
                phase(f"throughput batch{b}: repeat {i + 1}/{reps}")
                dt = forwards(x, iters)
                rows.append({"elapsed_s": dt, "items": b * iters, "items_per_s": b * iters / dt})
            out["throughput"][f"batch{b}"] = rows
            out["latency"][f"batch{b}"] = [{"latency_s": forwards(x, 1)} for _ in range(reps)]
            checkpoint()
    return out


def _profile(step, device: str) -> list[dict]:
    """Device kernels (names, counts, microseconds) of one step, as the vLLM worker extension reports them."""
    import torch

    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.profiler.profile(activities=acts) as prof:
        step()
        _sync(device)
    kernels, kernel_us = op_families.kernel_times(prof)
    return [{"pid": os.getpid(), "kernels": kernels, "kernel_us": kernel_us}]


if __name__ == "__main__":
    sys.exit(main(run))
