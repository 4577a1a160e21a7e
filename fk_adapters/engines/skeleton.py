"""The job protocol every engine driver follows, written once: an engine supplies only its own calls.

``Driver.run(job)`` builds the result, kept phase by phase (``driver_common.keep``), in this order: engine,
engine_version, torch, pid, what ``prepare`` and ``start`` add, startup_s, runtime, probe_after_start; correctness
(tokens, token_top_ids, token_logprobs, teacher_logprobs), probe_after_correctness; perf; profile; probe; status.

An engine subclasses ``Driver`` and supplies ``import_engine``, ``start``, ``probe``, ``greedy``, ``teacher``,
``timed`` and ``profile_steps``; a job that is not token generation overrides ``correctness``, ``perf`` and
``profile`` instead of the token calls.
"""
from __future__ import annotations

import contextlib
import os
import time

from fk_adapters import cpu_binding, jit_watch
from fk_adapters.engines.driver_common import OUTPUTS_FILE, keep, measure, measure_items, phase, save_outputs

TOP_K = 5  # the most likely tokens recorded per generated step


def top_ids(pairs) -> list[int]:
    """The ids of the TOP_K most likely of (logprob, id) pairs, best first (equal logprobs keep their order)."""
    return [int(t) for _, t in sorted(pairs, key=lambda p: -p[0])[:TOP_K]]


@contextlib.contextmanager
def values_paused():
    """fk capture's value statistics paused in every process of this run (its profiled steps' device time must be
    the model's own, not those reductions')."""
    from fk_adapters import probe
    from fk_adapters.check.value_stats import PAUSE_FILE

    folder = probe.run_dir()
    marker = os.path.join(folder, PAUSE_FILE) if folder else ""
    if marker:
        open(marker, "w").close()
    try:
        yield
    finally:
        if marker:
            os.remove(marker)


def _unprofiled(fn, *args) -> list[dict]:
    """A driver's ``profiled(fn, *args)`` (``profiled(step)`` in the transformers host) with no profiler: runs it."""
    fn(*args)
    return []


class Driver:
    """One engine's calls. ``run`` drives a job through them; the hooks below are what an engine overrides."""

    name = ""
    profile_phase = "profiling a few steps"

    def __init__(self) -> None:
        self._off_clock_s = 0.0

    # ------------------------------------------------------------------ what an engine supplies

    def import_engine(self) -> str:
        """Import the engine; its version."""
        raise NotImplementedError

    def prepare(self, job: dict, res: dict) -> None:
        """Set-up before the engine starts, off the startup clock (its arguments, folders)."""

    def start_phase(self, job: dict) -> str:
        return "starting engine"

    def start(self, job: dict, res: dict) -> None:
        """Start the engine (timed as startup_s, less what ran in ``off_clock``)."""
        raise NotImplementedError

    def runtime(self) -> dict | None:
        """How the engine runs the model, read after it started (None: no "runtime" entry)."""
        return None

    def runtime_at_end(self) -> dict | None:
        """The runtime again after every workload (None: the one read at start stays)."""
        return None

    def probe(self, tag: str) -> list[dict]:
        """The fk probe snapshots of every process serving the model; ``tag``: start, correctness or final."""
        raise NotImplementedError

    def greedy(self, prompts: list, max_tokens: int) -> tuple[list, list, list]:
        """Greedy generation: per prompt its tokens, TOP_K ids per step and the chosen tokens' logprobs."""
        raise NotImplementedError

    def teacher(self, seqs: list) -> list:
        """Per sequence, the logprob of each of its tokens after the first given those before it."""
        raise NotImplementedError

    def timed(self, prompts: list, output_len: int) -> tuple[float, int, int]:
        """(seconds, input tokens, output tokens) of one batch served to completion (see ``clocked``)."""
        raise NotImplementedError

    def profile_steps(self, prompts: list, max_tokens: int) -> list[dict]:
        """Device kernels (names, counts, microseconds) per process while serving this batch."""
        raise NotImplementedError

    def serving(self, job: dict):
        """The context correctness, perf and profile run in."""
        return contextlib.nullcontext()

    def sync(self) -> None:
        """Wait for the device: the clock reads only finished work."""

    def close(self) -> None:
        """Stop the engine (runs also when a phase raised)."""

    # ------------------------------------------------------------------ the protocol

    def correctness(self, job: dict, res: dict) -> None:
        corr = job["correctness"]
        phase("correctness: greedy generation")
        res["tokens"], res["token_top_ids"], res["token_logprobs"] = self.greedy(corr["prompts"], corr["max_tokens"])
        phase("correctness: teacher-forced logprobs")
        res["teacher_logprobs"] = self.teacher(corr["teacher"])

    def perf(self, job: dict) -> dict:
        return measure(job["perf"], self.timed)

    def profile(self, job: dict) -> list[dict]:
        """The profiled steps, with fk capture's value statistics paused in every engine process meanwhile. The same
        requests run once unprofiled first: one-time work on their shapes (a Triton kernel's compile or autotuning for
        a new size, lazy set-up) is no part of serving (sessions 35-36 saw steps of milliseconds of device time wait
        seconds on the host)."""
        with values_paused():
            self.profiled = _unprofiled  # the instance's, over any class's ``profiled``, for the warm-up only
            try:
                self.profile_job(job)
            finally:
                del self.profiled
            mark = jit_watch.Since()
            self.profile_wall_s = None
            out = self.profile_job(job)
            self.profile_compiled = jit_watch.summary(mark.new())
            return out

    def profiled_call(self, fn, *args) -> None:
        """``fn(*args)``, the requests an engine's ``profiled`` serves under its profiler, with its wall time kept
        (``profile_wall_s``): beside the timed repeats of the same requests, what the profiler cost the run."""
        self.profile_wall_s = self.clocked(fn, *args)[0]

    def profile_job(self, job: dict) -> list[dict]:
        """A token model's profiled run: one run of the latency workload the job names (the requests its timed repeats
        serve), else the first prompts of its correctness job (another family overrides)."""
        p = job["profile"]
        if p.get("latency"):
            w = job["perf"]["latency"][p["latency"]]
            return self.profile_steps(w["prompts"], w["output_len"])
        return self.profile_steps(job["correctness"]["prompts"][: p.get("requests", 4)], p.get("max_tokens", 8))

    def clocked(self, fn, *args, **kwargs) -> tuple[float, object]:
        """(seconds, result) of ``fn(*args, **kwargs)``, the device synced on both sides."""
        self.sync()
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        self.sync()
        return time.perf_counter() - t0, out

    def clocked_calls(self, n: int, fn, *args, **kwargs) -> float:
        """Seconds of ``n`` calls of ``fn(*args, **kwargs)``, the device synced on both sides."""
        def calls():
            for _ in range(n):
                fn(*args, **kwargs)

        return self.clocked(calls)[0]

    @contextlib.contextmanager
    def off_clock(self):
        """Time spent in this block during ``start`` is not startup time."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._off_clock_s += time.perf_counter() - t0

    def run(self, job: dict) -> dict:
        """The job's result: the engine started, correctness, perf and profile as the job asks, the probes."""
        import torch

        version = self.import_engine()
        res = keep({"engine": self.name, "engine_version": version, "torch": torch.__version__, "pid": os.getpid()})
        self.prepare(job, res)
        phase(self.start_phase(job))
        t0 = time.perf_counter()
        self.start(job, res)
        try:
            res["startup_s"] = time.perf_counter() - t0 - self._off_clock_s
            self._runtime(res, self.runtime())
            if os.environ.get(cpu_binding.VAR):
                res["host_cpus"] = cpu_binding.session_cpus()
            res["probe_after_start"] = self.probe("start")
            with self.serving(job):
                self.correctness(job, res)
                res["probe_after_correctness"] = self.probe("correctness")
                if job.get("perf"):
                    res["perf"] = self.perf(job)
                if job.get("profile"):
                    phase(self.profile_phase)
                    res["profile"] = self.profile(job)
                    if getattr(self, "profile_wall_s", None) is not None:
                        res["profile_wall_s"] = self.profile_wall_s
                    if getattr(self, "profile_compiled", ""):
                        res["profile_compiled"] = self.profile_compiled
            res["probe"] = self.probe("final")
            self._runtime(res, self.runtime_at_end())
        finally:
            self.close()
        res["status"] = "ok"
        return res

    @staticmethod
    def _runtime(res: dict, runtime: dict | None) -> None:
        if runtime is not None:
            res["runtime"] = runtime


class Embeddings:
    """An embedding model's side of a job with ``pooling`` (``scenarios._pooling_job``), for an engine driver that
    gives ``embed(seqs)`` -> a float32 tensor, [batch, dim] (or [batch, seq_len, dim] per token), and
    ``profiled(fn, *args)`` -> the device kernels its processes ran during ``fn(*args)``. It defines neither: as the
    drivers' first base, a stub here would hide the engine driver's own."""

    def correctness(self, job: dict, res: dict) -> None:
        seqs = job["pooling"]["correctness"]
        phase(f"correctness: embeddings of a seeded batch of {len(seqs)}")
        emb = self.embed(seqs)
        res.update(outputs_file=save_outputs({"embedding": emb}, OUTPUTS_FILE),
                   outputs={"embedding": list(emb.shape)})

    def perf(self, job: dict) -> dict:
        """Per batch size: items/s over ``iters`` embed calls per repeat, and the latency of one."""
        batches = job["pooling"]["batches"]
        return measure_items(job["perf"], lambda b: lambda n: self.clocked_calls(n, self.embed, batches[f"batch{b}"]))

    def profile_job(self, job: dict) -> list[dict]:
        return self.profiled(self.embed, job["pooling"]["correctness"])
