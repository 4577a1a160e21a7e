"""The job protocol every engine driver shares (``engines.skeleton``), driven with a fake engine's calls."""
import json
import os
import types

import pytest

from fk_adapters.engines import driver_common, skeleton
from fk_adapters.engines.driver_common import PARTIAL_FILE, PERF_UNFINISHED

PROMPTS = [[1, 2], [3, 4], [5, 6]]
JOB = {"correctness": {"prompts": PROMPTS, "max_tokens": 2, "teacher": [[1, 2, 3]]},
       "perf": {"repeats": 2, "warmup": 1, "throughput": {"w": {"prompts": PROMPTS, "output_len": 4}}},
       "profile": {"requests": 2, "max_tokens": 3}}
PROTOCOL = ["engine", "engine_version", "torch", "pid", "engine_args_left_out", "startup_s", "runtime",
            "probe_after_start", "tokens", "token_top_ids", "token_logprobs", "teacher_logprobs",
            "probe_after_correctness", "perf", "profile", "probe", "status"]


class Clock:
    def __init__(self):
        self.t = 0.0

    def perf_counter(self):
        return self.t


class FakeEngine(skeleton.Driver):
    """Each engine call records itself and moves a fake clock; ``fail`` names the call that raises."""

    name = "fake"

    def __init__(self, clock: Clock, fail: str = ""):
        super().__init__()
        self.clock, self.fail, self.seen = clock, fail, []

    def _call(self, what: str, seconds: float = 0.0):
        self.seen.append(what)
        self.clock.t += seconds
        if what == self.fail:
            raise MemoryError(f"out of memory in {what}")

    def import_engine(self):
        return "9.9"

    def prepare(self, job, res):
        self._call("prepare", 7.0)  # off the startup clock
        res["engine_args_left_out"] = ["x"]

    def start(self, job, res):
        self._call("start", 2.0)
        with self.off_clock():
            self._call("reference", 5.0)  # e.g. the transformers reference forward: not startup time

    def runtime(self):
        return {"read": "at start"}

    def runtime_at_end(self):
        return {"read": "at end"}

    def probe(self, tag):
        self._call(f"probe {tag}")
        return [{"tag": tag}]

    def greedy(self, prompts, max_tokens):
        self._call("greedy")
        n = len(prompts)
        return [[7] * max_tokens] * n, [[[7, 8]] * max_tokens] * n, [[-0.1] * max_tokens] * n

    def teacher(self, seqs):
        self._call("teacher")
        return [[-0.5] * (len(s) - 1) for s in seqs]

    def sync(self):
        self.seen.append("sync")

    def timed(self, prompts, output_len):
        dt, n_out = self.clocked(lambda: self._call("timed", 0.25) or len(prompts) * output_len)
        return dt, sum(map(len, prompts)), n_out

    def profile_steps(self, prompts, max_tokens):
        self._call(f"profile {len(prompts)}x{max_tokens}")
        return [{"pid": 1, "kernels": {"k": 1}, "kernel_us": {"k": 2.0}}]

    def close(self):
        self.seen.append("close")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(driver_common, "_kept", {"res": None, "path": None})


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(skeleton, "time", types.SimpleNamespace(perf_counter=c.perf_counter))
    return c


def test_the_result_carries_every_field_of_the_protocol_in_order(clock):
    engine = FakeEngine(clock)
    res = engine.run(JOB)
    assert list(res) == PROTOCOL
    assert res["engine"] == "fake" and res["engine_version"] == "9.9" and res["pid"] == os.getpid()
    assert res["startup_s"] == 2.0  # neither prepare nor what start ran off the clock
    assert res["runtime"] == {"read": "at end"} and res["status"] == "ok"
    assert [res[k] for k in ("probe_after_start", "probe_after_correctness", "probe")] == \
        [[{"tag": "start"}], [{"tag": "correctness"}], [{"tag": "final"}]]
    assert res["tokens"] == [[7, 7]] * 3 and res["token_top_ids"] == [[[7, 8]] * 2] * 3
    assert res["token_logprobs"] == [[-0.1, -0.1]] * 3 and res["teacher_logprobs"] == [[-0.5, -0.5]]
    rows = res["perf"]["throughput"]["w"]
    assert [r["elapsed_s"] for r in rows] == [0.25, 0.25] and rows[0]["output_tokens"] == 12
    assert rows[0]["input_tokens"] == 6 and rows[0]["tokens_per_s"] == 18 / 0.25
    assert res["profile"][0]["kernels"] == {"k": 1}
    timed = [i for i, s in enumerate(engine.seen) if s == "timed"]
    assert len(timed) == 3 and all(engine.seen[i - 1] == engine.seen[i + 1] == "sync" for i in timed)  # synced
    assert "profile 2x3" in engine.seen  # the job's first `requests` prompts, its max_tokens
    assert engine.seen[-1] == "close"


def test_a_job_without_perf_or_profile_has_neither_and_no_runtime_without_one(clock):
    engine = FakeEngine(clock)
    engine.runtime = engine.runtime_at_end = lambda: None
    res = engine.run({"correctness": JOB["correctness"]})
    assert "perf" not in res and "profile" not in res and "runtime" not in res
    assert not any(s == "timed" or s.startswith("profile") for s in engine.seen)


def test_the_runtime_read_at_start_stays_when_the_engine_reads_none_at_the_end(clock):
    engine = FakeEngine(clock)
    engine.runtime_at_end = lambda: None
    assert engine.run(JOB)["runtime"] == {"read": "at start"}


def _main(engine, tmp_path) -> dict:
    (tmp_path / "job.json").write_text(json.dumps(JOB))
    assert driver_common.main(engine.run, [str(tmp_path / "job.json"), str(tmp_path / "result.json")]) == 1
    return json.loads((tmp_path / "result.json").read_text())


def test_a_crash_in_perf_keeps_correctness_and_stops_the_engine(clock, tmp_path):
    engine = FakeEngine(clock, fail="timed")
    res = _main(engine, tmp_path)
    assert res["status"] == "error" and res["error"] == "MemoryError: out of memory in timed"
    assert res["tokens"] == [[7, 7]] * 3 and res["teacher_logprobs"] == [[-0.5, -0.5]]
    assert res["probe_after_correctness"] == [{"tag": "correctness"}] and "perf" not in res and "probe" not in res
    assert {"tokens", "token_top_ids", "token_logprobs", "teacher_logprobs", "probe_after_correctness",
            PERF_UNFINISHED} <= set(res["kept_from_partial"])
    partial = json.loads((tmp_path / PARTIAL_FILE).read_text())
    assert partial["tokens"] == res["tokens"] and "status" not in partial
    assert engine.seen[-1] == "close"


def test_an_engine_that_fails_to_start_is_not_stopped(clock, tmp_path):
    engine = FakeEngine(clock, fail="start")
    res = _main(engine, tmp_path)
    assert res["error"] == "MemoryError: out of memory in start" and res["engine_args_left_out"] == ["x"]
    assert "close" not in engine.seen and "startup_s" not in res


class FakeItems(FakeEngine):
    """A job that is not token generation: correctness, perf and profile of its own, no token calls."""

    def correctness(self, job, res):
        self._call("forward")
        res.update(outputs_file="/x/outputs.safetensors", outputs={"last_hidden_state": [2, 4]})

    def perf(self, job):
        return {"throughput": {"batch2": []}, "latency": {"batch2": []}}

    def profile(self, job):
        return [{"pid": 1, "kernels": {}, "kernel_us": {}}]


def test_another_family_supplies_its_own_correctness_perf_and_profile(clock):
    res = FakeItems(clock).run({"perf": {"batches": [2]}, "profile": {"requests": 1}})
    assert list(res) == PROTOCOL[:8] + ["outputs_file", "outputs", "probe_after_correctness", "perf", "profile",
                                        "probe", "status"]


def test_top_ids_rank_by_logprob_and_keep_the_order_of_ties():
    pairs = [(-3.0, 1), (-0.5, 2), (-1.0, 3), (-0.5, 4), (-2.0, 5), (-9.0, 6), (-0.1, 7)]
    assert skeleton.top_ids(pairs) == [7, 2, 4, 3, 5]
    assert skeleton.top_ids([]) == []


class FakeProfilingEngine(FakeEngine):
    """An engine driver with its own ``profiled``, as vLLM's and SGLang's drivers have."""

    def profiled(self, fn, *args):
        self.profiled_call(fn, *args)
        self._call("profiled", 1.0)  # stopping the profiler: not the profiled run's time
        return [{"pid": 1, "kernels": {"k": 1}, "kernel_us": {"k": 2.0}}]


class FakeEmbedder(skeleton.Embeddings, FakeProfilingEngine):
    """The pooling drivers' base order: the shared embedding job first, the engine's driver after it."""

    def embed(self, seqs):
        import torch

        self._call(f"embed {len(seqs)}", 0.5)
        return torch.ones(len(seqs), 4)


def test_an_embedding_job_profiles_with_its_engine_drivers_own_profiled(clock, tmp_path, monkeypatch):
    monkeypatch.setenv("FK_RUN_DIR", str(tmp_path))
    engine = FakeEmbedder(clock)
    res = engine.run({"pooling": {"correctness": [[1, 2], [3, 4, 5]]}, "profile": {"requests": 1}})
    assert res["status"] == "ok" and res["outputs"] == {"embedding": [2, 4]}
    assert res["profile"][0]["kernels"] == {"k": 1}
    # correctness, the unprofiled warm-up of the profiled batch, then the profiled call
    assert engine.seen.count("embed 2") == 3 and engine.seen.count("profiled") == 1
    assert res["profile_wall_s"] == 0.5  # the profiled run's own wall time, beside its timed repeats'
    assert "profile_wall_s" not in FakeEngine(clock).run(JOB)  # a driver that does not keep it: no figure


class FirstUseEngine(FakeProfilingEngine):
    """Its first step on a shape does one-time work (a Triton autotune): a profile must not contain it."""

    def profile_steps(self, prompts, max_tokens):
        return self.profiled(self._step, len(prompts))

    def _step(self, n):
        if f"step {n}" not in self.seen:
            self._call("autotune")
        self._call(f"step {n}")

    def profiled(self, fn, *args):
        self._call("profiler on")
        out = super().profiled(fn, *args)
        return [dict(out[0], one_time_work_inside="autotune" in self.seen[self.seen.index("profiler on"):])]


def test_the_profiled_step_runs_once_unprofiled_first(clock, tmp_path, monkeypatch):
    monkeypatch.setenv("FK_RUN_DIR", str(tmp_path))
    engine = FirstUseEngine(clock)
    res = engine.run({"correctness": {"prompts": [[1, 2]] * 4, "max_tokens": 2, "teacher": [[1, 2]]},
                      "profile": {"requests": 3}})
    assert res["profile"] == [{"pid": 1, "kernels": {"k": 1}, "kernel_us": {"k": 2.0}, "one_time_work_inside": False}]
    assert engine.seen.count("step 3") == 2 and engine.seen.count("profiler on") == 1
    assert "profiled" not in vars(engine)  # the class's own profiled is back


class StillCompilingEngine(FakeProfilingEngine):
    """Its profiled step meets a Triton specialization the unprofiled run did not (batches formed differently)."""

    def profile_steps(self, prompts, max_tokens):
        return self.profiled(lambda: None)

    def profiled(self, fn, *args):  # the profiled run only: the unprofiled one before it runs ``_unprofiled``
        self.compile_kernel("fused_moe_kernel")
        return super().profiled(fn, *args)


def test_a_compile_inside_the_profiled_step_is_recorded(clock, tmp_path, monkeypatch, triton_compiles):
    monkeypatch.setenv("FK_RUN_DIR", str(tmp_path))
    job = {"correctness": {"prompts": [[1, 2]] * 4, "max_tokens": 2, "teacher": [[1, 2]]}, "profile": {"requests": 3}}
    engine = StillCompilingEngine(Clock())
    engine.compile_kernel = triton_compiles
    assert engine.run(job).get("profile_compiled") == "fused_moe_kernel x1"
    assert FakeProfilingEngine(Clock()).run(job).get("profile_compiled") is None


def test_a_profile_naming_a_latency_workload_serves_its_requests(clock):
    """The profiled run is one run of the latency workload the job names (its prompts, its length), after a warm-up
    run of the same requests; without one, the first correctness prompts."""
    job = dict(JOB, perf=dict(JOB["perf"], latency={"batch3": {"prompts": PROMPTS, "output_len": 5}}),
               profile={"requests": 2, "max_tokens": 3, "latency": "batch3"})
    eng = FakeEngine(clock)
    eng.run(job)
    assert [s for s in eng.seen if s.startswith("profile")] == ["profile 3x5", "profile 3x5"]
    eng = FakeEngine(clock)
    eng.run(JOB)
    assert [s for s in eng.seen if s.startswith("profile")] == ["profile 2x3", "profile 2x3"]
