"""Run one job on HF transformers in this process and write its result JSON.

    python -m fk_adapters.engines.transformers.driver JOB.json RESULT.json

The model is built with ``from_pretrained`` and runs eager (cuda when this process sees a GPU). The selected
plugins are installed into its modules right after it is built, before any forward. LLMs (the job has
``correctness``): greedy tokens and teacher-forced logprobs, as the other engines' drivers give them, and
tokens/s. Other families: one forward on a seeded batch whose floating outputs are saved to
``outputs.safetensors`` for the runner to diff, and items/s. Each side first saves the stock model's forward of
that batch one precision up (float16/bfloat16: float32; float32: float64) to ``reference.safetensors``, before any
plugin is installed (``_reference``): the baseline's is the truth both sides are judged against; the candidate makes
its own so that both processes have the same history. A model of another library (the job's ``library``,
``libraries/``) is loaded by that library's loader as one module whose call is one item (a diffusion model: its whole
denoising loop), with its own inputs.
"""
from __future__ import annotations

import functools
import os
import sys
import time

from fk_adapters import metrics, op_families
from fk_adapters.engines import skeleton
from fk_adapters.engines.driver_common import OUTPUTS_FILE, main, measure_items, phase, save_outputs

REFERENCE_FILE = "reference.safetensors"


def tf32_state() -> str:
    """Whether float32 matmuls and cuDNN convolutions may run in TF32 (PyTorch's defaults: matmul off, cuDNN on)."""
    import torch

    return ", ".join(f"{what} {'on' if flag else 'off'}" for what, flag in (
        ("matmul", torch.backends.cuda.matmul.allow_tf32), ("cudnn", torch.backends.cudnn.allow_tf32)))


def load_model(job: dict, device: str):
    import transformers

    from fk_adapters.engines.transformers import action_loop, libraries
    from fk_adapters.model_classes import model_class

    library = libraries.of(job)
    if library != libraries.DEFAULT:
        return libraries.loader(library).load(job, device)

    arch = job["architectures"][0]
    cls = model_class(arch)
    if cls is None:
        raise ValueError(f"transformers {transformers.__version__} has no class {arch}")
    model = cls.from_pretrained(job["model_dir"], **load_kwargs(cls, job["dtype"])).to(device).eval()
    return action_loop.wrap(model, job.get("inputs", {}))


def load_kwargs(cls, dtype: str) -> dict:
    """In float32 (a reference run) MoE experts run one by one: transformers' batched experts
    gather a weight matrix per token, which for a prompt batch outgrows a GPU in float32."""
    import torch

    kw = {"dtype": getattr(torch, dtype)}
    if dtype == "float32" and hasattr(cls, "_can_set_experts_implementation"):
        kw["experts_implementation"] = "eager"
    return kw


def _generate(model, prompts, n: int, device: str, scores: bool = False):
    import torch

    ids = torch.tensor(prompts, dtype=torch.long, device=device)
    gen = model.generation_config
    pad = gen.pad_token_id if gen.pad_token_id is not None else 0
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, pad_token_id=pad, return_dict_in_generate=True,
                         output_scores=scores, output_logits=scores)
    return ids.shape[1], out


class TransformersDriver(skeleton.Driver):
    """An LLM built with ``from_pretrained`` in this process, the selected plugins routed into its modules."""

    name = "transformers"
    profile_phase = "profiling a batch"

    def import_engine(self) -> str:
        import torch
        import transformers

        transformers.utils.logging.disable_progress_bar()
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        return transformers.__version__

    def start_phase(self, job: dict) -> str:
        return f"loading {job['architectures'][0]} on {self.device}"

    def start(self, job: dict, res: dict) -> None:
        from fk_adapters import probe
        from fk_adapters.engines.loading import load_and_install
        from fk_adapters.engines.transformers import install
        from fk_adapters.plugins import any_selected_in_env

        self.model = model = load_model(job, self.device)
        if not probe.capturing() and not job.get("correctness"):
            with self.off_clock():
                res.update(_reference(model, job, self.device))  # the stock model, before any plugin enters it
        if any_selected_in_env():  # none selected: stock transformers, no fk code in the model
            load_and_install("transformers", self.device, lambda chosen: install.install(model, chosen), {})

    def runtime(self) -> dict | None:
        out = {"device": self.device, "mode": "eager",
               "attention": getattr(self.model.config, "_attn_implementation", None) or "?"}
        if self.device == "cuda":
            out["tf32"] = tf32_state()
        return out

    def probe(self, tag: str) -> list[dict]:
        from fk_adapters import probe

        return [probe.snapshot()]

    def serving(self, job: dict):
        import torch

        torch.manual_seed(job.get("seed", 0))  # models that draw at forward time (masks, noise) draw alike on each side
        return torch.inference_mode()

    def sync(self) -> None:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()

    def greedy(self, prompts: list, max_tokens: int) -> tuple[list, list, list]:
        import torch

        n_in, gen = _generate(self.model, prompts, max_tokens, self.device, scores=True)
        steps = len(gen.scores)
        top = torch.stack([s.float().topk(skeleton.TOP_K, dim=-1).indices for s in gen.scores], dim=1)  # [B, steps, k]
        lp = torch.stack([torch.log_softmax(x.float(), dim=-1) for x in gen.logits], dim=1)  # raw logits, [B, steps, V]
        chosen = gen.sequences[:, n_in:n_in + steps]
        return (gen.sequences[:, n_in:].tolist(), top.tolist(),
                lp.gather(-1, chosen[..., None]).squeeze(-1).tolist())

    def teacher(self, seqs: list) -> list:
        import torch

        ids = torch.tensor(seqs, dtype=torch.long, device=self.device)
        lp = torch.log_softmax(self.model(ids).logits.float(), dim=-1)
        return lp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1).tolist()

    def timed(self, prompts: list, output_len: int) -> tuple[float, int, int]:
        dt, (n_in, gen) = self.clocked(_generate, self.model, prompts, output_len, self.device)
        return dt, len(prompts) * n_in, gen.sequences[:, n_in:].numel()

    def profile_steps(self, prompts: list, max_tokens: int) -> list[dict]:
        return self.profiled(lambda: _generate(self.model, prompts, max_tokens, self.device))

    def profiled(self, step) -> list[dict]:
        """Device kernels (names, counts, microseconds) of one step, as the vLLM worker extension reports them."""
        import torch

        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.device == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts) as prof:
            self.profiled_call(step)
        return [{"pid": os.getpid(), **op_families.kernel_profile(prof)}]


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


def batch(model, job: dict, b: int, device: str) -> dict:
    """Seeded inputs of one call of ``model`` over ``b`` items: ``inputs.py``'s, or its library loader's."""
    import torch

    from fk_adapters.engines.transformers import inputs, libraries

    library = libraries.of(job)
    make = inputs.batch if library == libraries.DEFAULT else libraries.loader(library).batch
    return make(model, job["inputs"], b, job.get("seed", 0), device, getattr(torch, job["dtype"]))


def _correctness_batch(model, job: dict, device: str) -> dict:
    return batch(model, job, job["correctness_batch"], device)


def upcast(model, dtype, done: dict, to) -> None:
    """Every parameter and buffer of ``dtype`` to ``to``, in place; ``done`` records each one for ``downcast``."""
    import torch

    with torch.no_grad():
        for m in model.modules():
            for table, is_param in ((m._parameters, True), (m._buffers, False)):
                for name, t in table.items():
                    if t is not None and t.dtype == dtype:
                        if is_param:
                            t.data = t.data.to(to)
                        else:
                            table[name] = t.to(to)
                        done[(m, name, is_param)] = dtype


def downcast(done: dict) -> None:
    """Undo ``upcast``: back to the job's dtype is exact for values that came from there."""
    import torch

    with torch.no_grad():
        for (m, name, is_param), dtype in done.items():
            if is_param:
                m._parameters[name].data = m._parameters[name].data.to(dtype)
            else:
                m._buffers[name] = m._buffers[name].to(dtype)


def _reference(model, job: dict, device: str) -> dict:
    """The stock model's forward of the correctness batch one precision up (``metrics.reference_dtype``: the job dtype's
    inputs, upcast), saved to ``reference.safetensors``. The model is upcast in place, run without TF32, and cast back
    bit for bit; on a GPU its weights need twice the job dtype's memory meanwhile (28 GB for a 7B bf16 model). A
    failure (out of memory, an op without a float64 kernel, say) is recorded as ``reference_error`` and the run goes
    on: the runner then falls back to fixed thresholds."""
    import torch

    ref = metrics.reference_dtype(job["dtype"])
    phase(f"correctness: {ref} reference forward of the stock model")
    t0 = time.perf_counter()
    to = getattr(torch, ref)
    x = {k: v.to(to) if v.is_floating_point() else v for k, v in _correctness_batch(model, job, device).items()}
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    default = torch.get_default_dtype()
    done: dict = {}
    try:
        upcast(model, getattr(torch, job["dtype"]), done, to)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        torch.set_default_dtype(to)  # what the forward makes itself (a timestep embedding, say) one precision up too
        torch.manual_seed(job.get("seed", 0))
        with torch.inference_mode():
            out = {"reference_file": save_outputs(_outputs(model, x), REFERENCE_FILE)}
    except Exception as exc:  # noqa: BLE001 - the run goes on without a reference
        out = {"reference_error": f"{type(exc).__name__}: {exc}"[:500]}
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
        torch.set_default_dtype(default)
        downcast(done)
        if device == "cuda":
            torch.cuda.empty_cache()
    out["reference_s"] = time.perf_counter() - t0
    return out


class ItemsDriver(TransformersDriver):
    """A model of another family: one forward on a seeded batch (its outputs saved for the runner), items/s."""

    def correctness(self, job: dict, res: dict) -> None:
        phase(f"correctness: one forward on a seeded batch of {job['correctness_batch']}")
        self.x = _correctness_batch(self.model, job, self.device)
        tensors = _outputs(self.model, self.x)
        res.update(outputs_file=save_outputs(tensors, OUTPUTS_FILE),
                   outputs={k: list(v.shape) for k, v in tensors.items()})

    def perf(self, job: dict) -> dict:
        """Per batch size: items/s over ``iters`` forwards per repeat, and the latency of one forward."""
        return measure_items(job["perf"], lambda b: functools.partial(self._forwards, batch(self.model, job, b,
                                                                                            self.device)))

    def _forwards(self, x: dict, n: int) -> float:
        return self.clocked_calls(n, self.model, **x)

    def profile_job(self, job: dict) -> list[dict]:
        return self.profiled(lambda: self.model(**self.x))


def run(job: dict) -> dict:
    """LLMs (the job has ``correctness``) generate tokens; other families run seeded forwards."""
    return (TransformersDriver if job.get("correctness") else ItemsDriver)().run(job)


if __name__ == "__main__":
    sys.exit(main(run))
