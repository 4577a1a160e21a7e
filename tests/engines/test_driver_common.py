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
