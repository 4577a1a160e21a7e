"""The drivers' shared plumbing: a run that fails or is killed keeps the results of the phases it finished."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from fk_adapters.engines import driver_common
from fk_adapters.engines.driver_common import PARTIAL_FILE, PERF_UNFINISHED, keep, main, measure, phase

PERF = {"repeats": 2, "warmup": 1, "throughput": {"w1": {"prompts": [[1]], "output_len": 2},
                                                   "w2": {"prompts": [[1]], "output_len": 2}}}


def _job(tmp_path) -> tuple[str, str]:
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"perf": PERF}))
    return str(job), str(tmp_path / "result.json")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(driver_common, "_kept", {"res": None, "path": None})


def test_a_run_that_raises_in_its_timed_phase_keeps_its_correctness(tmp_path):
    """The GPU incident: out of memory in the throughput phase wrote only status, error and traceback."""
    def run(job):
        res = keep({"engine": "fake", "pid": os.getpid()})
        phase("correctness")
        res["tokens"], res["teacher_logprobs"] = [[1, 2]], [[-0.5]]
        res["perf"] = measure(job["perf"], lambda prompts, n: (_ for _ in ()).throw(MemoryError("CUDA out of memory")))
        res["status"] = "ok"
        return res

    assert main(run, _job(tmp_path)) == 1
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["status"] == "error" and res["error"] == "MemoryError: CUDA out of memory"
    assert res["tokens"] == [[1, 2]] and res["teacher_logprobs"] == [[-0.5]] and "perf" not in res
    assert res["kept_from_partial"] == ["engine", "perf_unfinished", "pid", "teacher_logprobs", "tokens"]
    assert res[PERF_UNFINISHED] == {"throughput": {}, "latency": {}}  # no workload finished: nothing timed is kept
    partial = json.loads((tmp_path / PARTIAL_FILE).read_text())  # written before the fatal warm-up
    assert partial["tokens"] == [[1, 2]] and "status" not in partial


KILLED = """
    import os, signal, sys
    from fk_adapters.engines.driver_common import keep, main, measure, phase

    def timed(prompts, n):
        if timed.calls == 4:  # w1: warm-up and 2 repeats, w2: its warm-up; then the kernel takes the process down
            os.kill(os.getpid(), signal.SIGKILL)
        timed.calls += 1
        return 0.5, 1, n
    timed.calls = 1

    def run(job):
        res = keep({"engine": "fake"})
        phase("correctness")
        res["tokens"], res["teacher_logprobs"] = [[1, 2]], [[-0.5]]
        res["probe_after_correctness"] = [{"pid": os.getpid(), "calls": {"p:rms_norm": 3}}]
        res["perf"] = measure(job["perf"], timed)
        res["status"] = "ok"
        return res

    sys.exit(main(run))
"""


def test_a_driver_killed_in_its_throughput_phase_leaves_its_finished_phases(tmp_path):
    """No result (the process got SIGKILL: out of host memory, or fk's time limit), but partial.json."""
    job, result = _job(tmp_path)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(KILLED), job, result], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not os.path.exists(result)
    partial = json.loads((tmp_path / PARTIAL_FILE).read_text())
    assert partial["tokens"] == [[1, 2]] and partial["teacher_logprobs"] == [[-0.5]]
    assert partial["probe_after_correctness"][0]["calls"] == {"p:rms_norm": 3}
    assert list(partial[PERF_UNFINISHED]["throughput"]) == ["w1"]  # the finished workload, never as "perf"
    assert len(partial[PERF_UNFINISHED]["throughput"]["w1"]) == 2 and "perf" not in partial


def test_a_finished_run_writes_its_result_whole_and_perf_as_perf(tmp_path):
    def run(job):
        res = keep({"engine": "fake"})
        res["perf"] = measure(job["perf"], lambda prompts, n: (0.5, 1, n))
        res["status"] = "ok"
        return res

    assert main(run, _job(tmp_path)) == 0
    res = json.loads((tmp_path / "result.json").read_text())
    assert list(res["perf"]["throughput"]) == ["w1", "w2"] and PERF_UNFINISHED not in res
    assert "kept_from_partial" not in res and not os.path.exists(tmp_path / "result.json.tmp")


def test_phase_writes_nothing_outside_a_driver_process(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    keep({"engine": "fake"})
    phase("x")
    assert capsys.readouterr().out == "[fk] x\n" and os.listdir(tmp_path) == []


def _compiling_timer(compile_kernel, compiles_on: set, seconds: dict):
    """A fake ``timed``: call i (0 = the warm-up) takes seconds.get(i, 1.0) and, when i is in compiles_on, compiles
    a kernel, as an engine process's first call on a new specialization does."""
    calls = []

    def timed(prompts, n):
        i = len(calls)
        calls.append(i)
        if i in compiles_on:
            compile_kernel("fused_moe_kernel")
        return seconds.get(i, 1.0), 10, 10

    return timed


def test_a_timed_repeat_that_compiled_a_kernel_is_run_again_and_listed(triton_compiles):
    """Session 42 on an H200: single timed runs 1-1.5 s slow in early engine processes while Triton compiled."""
    perf = {"repeats": 2, "warmup": 1, "throughput": {"w": {"prompts": [[1]], "output_len": 2}}}
    out = measure(perf, _compiling_timer(triton_compiles, compiles_on={0, 1}, seconds={1: 2.5}))
    assert [r["elapsed_s"] for r in out["throughput"]["w"]] == [1.0, 1.0]  # a compile in the warm-up is no matter
    assert out["retimed"] == [{"workload": "throughput w", "elapsed_s": 2.5, "compiled": "fused_moe_kernel x1"}]
    assert "compiled_while_timed" not in out


def test_a_repeat_that_keeps_compiling_is_kept_and_named(triton_compiles):
    perf = {"repeats": 1, "warmup": 0, "latency": {"batch1": {"prompts": [[1]], "output_len": 2}}}
    out = measure(perf, _compiling_timer(triton_compiles, compiles_on={0, 1, 2}, seconds={0: 3.0, 1: 2.0, 2: 1.5}))
    assert out["latency"]["batch1"] == [{"latency_s": 1.5}]
    assert [e["elapsed_s"] for e in out["retimed"]] == [3.0, 2.0]
    assert [e["s"] for e in out["timeline"]] == [3.0, 2.0, 1.5]  # every timed call, the discarded ones too
    assert out["compiled_while_timed"][0]["workload"] == "latency batch1"


def test_with_nothing_compiled_the_timings_are_the_repeats(triton_compiles):
    perf = {"repeats": 1, "warmup": 0, "throughput": {"w": {"prompts": [[1]], "output_len": 2}}}
    out = measure(perf, lambda prompts, n: (2.0, 1, 1))
    assert [e["workload"] for e in out.pop("timeline")] == ["throughput w"]
    assert out == {"throughput": {"w": [{"elapsed_s": 2.0, "tokens_per_s": 1.0, "output_tokens_per_s": 0.5,
                                         "input_tokens": 1, "output_tokens": 1}]}, "latency": {}}


def test_latency_keeps_its_own_repeats_when_throughput_is_cut_to_one(triton_compiles):
    w = {"prompts": [[1]], "output_len": 2}
    out = measure({"repeats": 1, "latency_repeats": 3, "warmup": 0, "throughput": {"t": w}, "latency": {"l": w}},
                  lambda prompts, n: (1.0, 1, 1))
    assert len(out["throughput"]["t"]) == 1 and len(out["latency"]["l"]) == 3


def test_an_items_repeat_that_compiled_is_run_again(triton_compiles):
    """The module hosts' items/s path: a timed call returns seconds alone."""
    calls = []

    def timer(b):
        def timed(n):
            calls.append(n)
            if len(calls) == 2:  # the first timed call (after the warm-up) compiles a kernel and runs long
                triton_compiles("_conv_kernel")
                return 9.0
            return 1.0
        return timed

    out = driver_common.measure_items({"repeats": 1, "warmup": 1, "iters": 2, "batches": [4]}, timer)
    assert out["throughput"]["batch4"][0]["elapsed_s"] == 1.0
    assert out["retimed"] == [{"workload": "throughput batch4", "elapsed_s": 9.0, "compiled": "_conv_kernel x1"}]


def test_a_short_warmup_serves_the_first_share_and_the_timed_repeats_all(triton_compiles):
    """--warmup-share: the warm-up pass of a throughput workload serves its first requests only; latency workloads
    and the timed repeats serve every request. A shape it missed compiles in a timed repeat, which is run again."""
    served = []

    def timed(prompts, n):
        served.append(len(prompts))
        if len(served) == 2:  # the first timed repeat meets a shape the short warm-up did not
            triton_compiles("fk_triton_gemm_kernel")
            return 4.0, 1, 1
        return 1.0, 1, 1

    w = {"prompts": [[i] for i in range(10)], "output_len": 2}
    out = measure({"repeats": 1, "warmup": 1, "warmup_share": 0.25, "throughput": {"t": w},
                   "latency": {"l": {"prompts": [[1]] * 4, "output_len": 2}}}, timed)
    assert served == [3, 10, 10, 4, 4]  # ceil(10 x 0.25) = 3; the latency warm-up serves its whole batch
    assert out["throughput"]["t"][0]["elapsed_s"] == 1.0 and out["retimed"][0]["elapsed_s"] == 4.0
    assert driver_common.warmup_prompts([[1]], 0.01) == [[1]]
    assert driver_common.warmup_prompts(w["prompts"], 1.0) is w["prompts"]
