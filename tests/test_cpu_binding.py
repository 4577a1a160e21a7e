"""cpu_binding: the CPUs local to a run's GPUs, read from nvidia-smi and sysfs; applied in the engine process."""
import os
import subprocess
import sys
import textwrap

import pytest

from fk_adapters import cpu_binding, gpu_share
from fk_adapters.runner.proc import run_job

SMI = ("0, GPU-a, 00000000:19:00.0\n1, GPU-b, 00000000:3B:00.0\n"
       "2, GPU-c, 00000000:9B:00.0\n3, GPU-d, 00000000:BB:00.0\n")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """Two NUMA nodes of 32 CPUs: GPUs 0 and 1 on the first, 2 and 3 on the second."""
    for bus, cpus in (("0000:19:00.0", "0-15,64-79"), ("0000:3b:00.0", "0-15,64-79"),
                      ("0000:9b:00.0", "16-31,80-95"), ("0000:bb:00.0", "16-31,80-95")):
        (tmp_path / bus).mkdir()
        (tmp_path / bus / "local_cpulist").write_text(cpus + "\n")
    monkeypatch.setattr(cpu_binding, "SYSFS_PCI", str(tmp_path))
    monkeypatch.setattr(gpu_share.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=SMI, stderr=""))
    monkeypatch.setattr(cpu_binding.os, "sched_getaffinity", lambda pid: set(range(32)) | set(range(64, 96)))
    return tmp_path


def test_cpu_lists_read_and_written_as_linux_writes_them():
    assert cpu_binding.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert cpu_binding.format_cpulist({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11"
    assert cpu_binding.format_cpulist(set()) == ""
    with pytest.raises(ValueError):
        cpu_binding.parse_cpulist("0-x")


def test_a_run_is_bound_to_the_cpus_of_the_node_its_gpus_sit_on(host):
    node = "the GPUs' node"
    assert cpu_binding.plan({"CUDA_VISIBLE_DEVICES": "0,1"}) == {"cpus": "0-15,64-79", "gpus": "0,1", "share": node}
    assert cpu_binding.plan({"CUDA_VISIBLE_DEVICES": "GPU-d"}) == {"cpus": "16-31,80-95", "gpus": "GPU-d",
                                                                  "share": node}
    # GPUs on both nodes, or every GPU visible: nothing to gain
    assert cpu_binding.plan({"CUDA_VISIBLE_DEVICES": "1,2"}) == {"unbound": cpu_binding.ONE_NODE}
    assert cpu_binding.plan({}) == {"unbound": cpu_binding.ONE_NODE}


def test_fk_may_only_bind_within_the_cpus_it_was_given(host, monkeypatch):
    monkeypatch.setattr(cpu_binding.os, "sched_getaffinity", lambda pid: set(range(8, 24)))
    assert cpu_binding.plan({"CUDA_VISIBLE_DEVICES": "0"})["cpus"] == "8-15"
    monkeypatch.setattr(cpu_binding.os, "sched_getaffinity", lambda pid: {40, 41})
    assert "is one fk may run on" in cpu_binding.plan({"CUDA_VISIBLE_DEVICES": "0"})["unbound"]


def test_each_gpu_may_get_its_own_share_of_its_node_in_whole_cores(host, tmp_path, monkeypatch):
    """FK_BIND_CPUS=gpu: GPUs 0 and 1 share a node of 16 cores with two threads each (c and c + 64)."""
    for c in [*range(32), *range(64, 96)]:
        (tmp_path / "cpu" / f"cpu{c}" / "topology").mkdir(parents=True)
        (tmp_path / "cpu" / f"cpu{c}" / "topology" / "thread_siblings_list").write_text(f"{c % 64},{c % 64 + 64}")
    monkeypatch.setattr(cpu_binding, "SYSFS_CPU", str(tmp_path / "cpu"))

    def share(cvd):
        return cpu_binding.plan({"CUDA_VISIBLE_DEVICES": cvd, "FK_BIND_CPUS": "gpu"})
    assert share("0") == {"cpus": "0-7,64-71", "gpus": "0", "share": "each GPU's share of its node"}
    assert share("1")["cpus"] == "8-15,72-79" and share("3")["cpus"] == "24-31,88-95"
    assert share("0,1")["cpus"] == "0-15,64-79"  # both shares: the whole node
    # a single-GPU host of one node: its share is every CPU, nothing to bind
    monkeypatch.setattr(gpu_share.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, 0, stdout="0, GPU-a, 00000000:19:00.0\n", stderr=""))
    monkeypatch.setattr(cpu_binding.os, "sched_getaffinity", lambda pid: set(range(16)) | set(range(64, 80)))
    assert share("0") == {"unbound": cpu_binding.ONE_NODE}


def test_unbound_when_turned_off_or_the_gpus_cannot_be_placed(host, monkeypatch):
    assert cpu_binding.plan({"CUDA_VISIBLE_DEVICES": "0", "FK_BIND_CPUS": "0"}) == {"unbound": "FK_BIND_CPUS=0"}
    assert "PCI bus" in cpu_binding.plan({"CUDA_VISIBLE_DEVICES": "0,7"})["unbound"]  # no GPU 7
    assert "PCI bus" in cpu_binding.plan({"CUDA_VISIBLE_DEVICES": "MIG-1"})["unbound"]
    (host / "0000:19:00.0" / "local_cpulist").unlink()
    assert "could not be read" in cpu_binding.plan({"CUDA_VISIBLE_DEVICES": "0"})["unbound"]

    def missing(*a, **k):
        raise FileNotFoundError("nvidia-smi")
    monkeypatch.setattr(gpu_share.subprocess, "run", missing)
    assert "PCI bus" in cpu_binding.plan({"CUDA_VISIBLE_DEVICES": "1"})["unbound"]


def test_the_report_names_the_binding_and_what_went_astray():
    def res(binding, ran=None):
        return {"cpu_binding": binding, **({"host_cpus": ran} if ran else {})}
    a, b = {"cpus": "0-15", "gpus": "0"}, {"cpus": "16-31", "gpus": "2", "share": "the GPUs' node"}
    runs = {"baseline": [res(a, "0-15"), res(a, "0-7")], "candidate": [res(b, "16-31"), res(b, "0-31")]}
    notes = cpu_binding.findings(runs)
    assert notes[0].startswith("engine processes ran on the host CPUs local to their GPUs (the GPUs' node; ")
    assert "GPU 0: CPUs 0-15 (2 processes); GPU 2: CPUs 16-31 (2 processes)" in notes[0]
    assert notes[1] == "asked to run on the CPUs they were bound to, round 2 candidate ran on CPUs 0-31"
    off = {"baseline": [res({"unbound": "FK_BIND_CPUS=0"})], "candidate": [res({"unbound": cpu_binding.ONE_NODE})]}
    assert cpu_binding.findings(off) == ["baseline: not bound to the GPUs' host CPUs (FK_BIND_CPUS=0)"]
    assert cpu_binding.findings({"baseline": [{}], "candidate": [{}]}) == []  # CPU runs: nothing to say


DRIVER = """
    import os, sys, threading
    from fk_adapters.engines import driver_common

    started = threading.Event()
    early = threading.Thread(target=started.wait, daemon=True)  # a thread older than the binding
    early.start()

    def run(job):
        try:
            return {"status": "ok", "main": sorted(os.sched_getaffinity(0)),
                    "early": sorted(os.sched_getaffinity(early.native_id))}
        finally:
            started.set()

    sys.exit(driver_common.main(run))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="binding to one CPU of one changes nothing")
def test_the_engine_process_runs_bound_every_thread_of_it(tmp_path, monkeypatch):
    (tmp_path / "bound_driver.py").write_text(textwrap.dedent(DRIVER))
    one = max(os.sched_getaffinity(0))
    monkeypatch.setattr(cpu_binding, "plan", lambda env: {"cpus": str(one), "gpus": "0"})
    monkeypatch.setattr(gpu_share, "gpu_processes", lambda: [])
    monkeypatch.setenv("FK_LOCK_DIR", str(tmp_path))
    res = run_job(sys.executable, "bound_driver", {}, str(tmp_path / "run"), {"PYTHONPATH": str(tmp_path)}, 60,
                  watch_gpu=True)
    assert res["status"] == "ok", res
    assert res["main"] == res["early"] == [one] and res["host_cpus"] == str(one)
    assert res["cpu_binding"] == {"cpus": str(one), "gpus": "0"}
    unbound = run_job(sys.executable, "bound_driver", {}, str(tmp_path / "cpu"), {"PYTHONPATH": str(tmp_path)}, 60)
    assert unbound["main"] == sorted(os.sched_getaffinity(0)) and "host_cpus" not in unbound
    assert "cpu_binding" not in unbound


def test_the_session_s_cpus_hold_this_process_s():
    assert cpu_binding.parse_cpulist(cpu_binding.session_cpus()) >= os.sched_getaffinity(0)


def test_a_cpu_list_binds_every_engine_process_to_exactly_those_cpus(host):
    """FK_BIND_CPUS=0-7: both sides of a comparison on the same CPUs, on any host (session 57: one H100 VM's engine
    processes ran their host work 0.6x-1.3x as fast as each other's)."""
    assert cpu_binding.plan({"CUDA_VISIBLE_DEVICES": "2", "FK_BIND_CPUS": "0-3,64"}) == {
        "cpus": "0-3,64", "gpus": "2", "share": cpu_binding.ASKED}  # not GPU 2's node: as asked
    assert cpu_binding.plan({"FK_BIND_CPUS": "5"})["gpus"] == "all"
    runs = {"baseline": [{"cpu_binding": cpu_binding.plan({"FK_BIND_CPUS": "0-3"}), "host_cpus": "0-3"}]}
    assert cpu_binding.findings(runs) == [
        "engine processes ran on the host CPUs FK_BIND_CPUS asked for: GPU all: CPUs 0-3 (1 process)"]
    cpu_binding.check({"FK_BIND_CPUS": "0-7"})
    cpu_binding.check({"FK_BIND_CPUS": "gpu"})
    with pytest.raises(ValueError, match="not 0, 1, gpu or a CPU list"):
        cpu_binding.check({"FK_BIND_CPUS": "fast"})
    with pytest.raises(ValueError, match="fk may run on CPUs 0-31,64-95 only"):
        cpu_binding.check({"FK_BIND_CPUS": "30-40"})
    # where no check ran first (a capture, say), the processes run unbound, with why
    assert "not 0, 1, gpu" in cpu_binding.plan({"FK_BIND_CPUS": "fast"})["unbound"]


def test_fk_run_refuses_a_binding_it_cannot_make_before_any_engine_starts(monkeypatch):
    from fk_adapters.cli import run_cmd
    from fk_adapters.cli.errors import UsageError

    monkeypatch.setenv("FK_BIND_CPUS", "fast")
    with pytest.raises(UsageError, match="FK_BIND_CPUS='fast'"):
        run_cmd._check_binding("cuda")
    run_cmd._check_binding("cpu")  # a CPU run binds nothing
