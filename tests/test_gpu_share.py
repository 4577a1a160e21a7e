"""The GPU watcher with a fake nvidia-smi and a fake /proc: whose processes are on the GPU during an engine run."""
import os
import subprocess
import sys
import time

import pytest

from fk_adapters import gpu_share

ENGINE, WORKER, OTHER, GONE = 100, 101, 200, 300
SESSIONS = {ENGINE: ENGINE, WORKER: ENGINE, OTHER: 200}  # the engine leads its own session; GONE has no /proc


@pytest.fixture
def gpu(monkeypatch):
    """gpu.procs: what nvidia-smi lists on each sample, (pid, name, MiB, gpu); gpu.error: what it raises instead."""
    class Gpu:
        procs: list = []
        error = None

    def query():
        if Gpu.error:
            raise gpu_share.QueryError(Gpu.error)
        return [{"pid": p, "name": n, "used_mib": m, "gpu": g} for p, n, m, g in Gpu.procs]
    monkeypatch.setattr(gpu_share, "gpu_processes", query)
    monkeypatch.setattr(gpu_share, "session_id", SESSIONS.get)
    return Gpu


def sampled(gpu, *samples) -> dict:
    """The watcher's result after one sample per list of processes, taken by hand (no thread)."""
    w = gpu_share.Watcher(ENGINE)
    for procs in samples:
        gpu.procs = procs
        w.sample()
    return w.result()


def test_the_engines_own_processes_are_not_foreign(gpu):
    res = sampled(gpu, [(ENGINE, "python3", 900, "g0")],
                  [(ENGINE, "python3", 900, "g0"), (WORKER, "VLLM::Worker", 18000, "g0")])
    assert res == {"watched": True, "samples": 2, "foreign": []}


def test_another_session_on_the_gpu_is_foreign_with_its_peak_memory(gpu):
    res = sampled(gpu, [(OTHER, "python3", 12000, "g0")],
                  [(WORKER, "VLLM::Worker", 18000, "g0"), (OTHER, "python3", 18482, "g0")],
                  [(WORKER, "VLLM::Worker", 18000, "g0")])
    assert res["watched"] and res["samples"] == 3
    assert res["foreign"] == [{"pid": OTHER, "name": "python3", "max_used_mib": 18482, "samples": 2}]


def test_a_foreign_process_on_another_gpu_of_the_host_does_not_count(gpu):
    res = sampled(gpu, [(WORKER, "w", 18000, "g0"), (OTHER, "python3", 40000, "g1")])
    assert res["foreign"] == []
    # before the engine's own processes show, the GPU it will use is unknown: every other process counts
    assert sampled(gpu, [(OTHER, "python3", 40000, "g1")])["foreign"][0]["pid"] == OTHER


def test_a_pid_gone_before_its_session_was_read_counts_as_foreign_and_says_so(gpu):
    res = sampled(gpu, [(WORKER, "w", 18000, "g0"), (GONE, "python3", None, "g0")])
    assert res["foreign"] == [{"pid": GONE, "name": "python3", "max_used_mib": None, "samples": 1, "pid_gone": True}]


def test_pids_this_machine_cannot_read_at_all_are_not_a_clean_watch(gpu):
    """nvidia-smi in a container with its own PID namespace lists the host's pids: nothing is known, nothing claimed."""
    res = sampled(gpu, [(GONE, "python3", 18000, "g0")])
    assert res["watched"] is False and "PID namespace" in res["why"]


def test_an_engine_never_listed_is_not_a_clean_watch(gpu):
    """A container's nvidia-smi may list no process at all: an empty GPU is not proof of one."""
    res = sampled(gpu, [], [])
    assert res["watched"] is False and "never listed a process of the engine" in res["why"]


def test_no_nvidia_smi_means_not_watched(gpu):
    gpu.error = "nvidia-smi not found"
    res = sampled(gpu, [], [])
    assert res == {"watched": False, "why": "nvidia-smi not found"}


def test_some_failed_samples_are_counted(gpu):
    w = gpu_share.Watcher(ENGINE)
    gpu.procs = [(WORKER, "w", 1, "g0")]
    w.sample()
    gpu.error = "nvidia-smi exited with 9"
    w.sample()
    assert w.result() == {"watched": True, "samples": 1, "foreign": [], "failed_samples": 1}


def test_an_engine_gone_before_its_session_was_read_is_not_watched(gpu):
    w = gpu_share.Watcher(GONE)
    w.sample()
    assert w.result()["watched"] is False and "gone" in w.result()["why"]


def test_the_thread_samples_until_stopped(gpu):
    gpu.procs = [(WORKER, "w", 1, "g0"), (OTHER, "python3", 5, "g0")]
    with gpu_share.Watcher(ENGINE, interval_s=0.01) as w:
        time.sleep(0.1)
    res = w.result()
    assert res["samples"] >= 2 and res["foreign"][0]["samples"] == res["samples"]
    n = res["samples"]
    time.sleep(0.05)
    assert w.result()["samples"] == n  # stopped


def test_missing_or_failing_nvidia_smi_raises_query_error(monkeypatch):
    monkeypatch.setattr(gpu_share, "QUERY", ["/nonexistent/nvidia-smi"])
    with pytest.raises(gpu_share.QueryError, match="not found"):
        gpu_share.gpu_processes()
    monkeypatch.setattr(gpu_share, "QUERY", [sys.executable, "-c", "import sys; sys.exit('NVML: driver gone')"])
    with pytest.raises(gpu_share.QueryError, match="exited with 1: NVML: driver gone"):
        gpu_share.gpu_processes()


def test_nvidia_smi_lines_are_parsed(monkeypatch):
    out = "4242, /usr/bin/python3, 18482, GPU-aa\n77, my, odd name, [N/A], GPU-bb\n"
    monkeypatch.setattr(gpu_share, "QUERY", [sys.executable, "-c", f"print({out!r}, end='')"])
    assert gpu_share.gpu_processes() == [
        {"pid": 4242, "name": "/usr/bin/python3", "used_mib": 18482, "gpu": "GPU-aa"},
        {"pid": 77, "name": "my,odd name", "used_mib": None, "gpu": "GPU-bb"}]


def test_session_id_of_a_real_process_from_proc():
    if not os.path.exists(f"/proc/{os.getpid()}/stat"):
        pytest.skip("no /proc")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"], start_new_session=True)
    try:
        assert gpu_share.session_id(child.pid) == child.pid  # a new session is led by its first process
        assert gpu_share.session_id(os.getpid()) == os.getsid(0)
    finally:
        child.kill()
        child.wait()
    assert gpu_share.session_id(child.pid) is None


def test_the_session_is_read_after_the_last_parenthesis_of_the_command_name():
    assert gpu_share.stat_session("4242 (py) thon (x)) S 1 4000 4001 0 -1") == 4001


def test_gpu_names_follow_the_visible_devices(monkeypatch):
    smi = "0, GPU-aaa, NVIDIA H100 80GB HBM3\n1, GPU-bbb, NVIDIA H200\n"
    monkeypatch.setattr(gpu_share.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=smi, stderr=""))
    assert gpu_share.gpu_names("1") == ["NVIDIA H200"]
    assert gpu_share.gpu_names("GPU-aaa,1") == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu_share.gpu_names() == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]

    def missing(*a, **k):
        raise FileNotFoundError("nvidia-smi")
    monkeypatch.setattr(gpu_share.subprocess, "run", missing)
    assert gpu_share.gpu_names("0") == []
