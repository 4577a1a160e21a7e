"""How busy the host's CPUs were during timed calls."""
import pytest

from fk_adapters import host_cpu


def test_busy_share_comes_from_proc_stat(monkeypatch):
    reads = iter([(100, 1000), (150, 1100)])
    monkeypatch.setattr(host_cpu, "jiffies", lambda: next(reads))
    assert host_cpu.busy_since(host_cpu.jiffies()) == 0.5
    monkeypatch.setattr(host_cpu, "jiffies", lambda: None)
    assert host_cpu.busy_since((1, 2)) is None and host_cpu.busy_since(None) is None


def test_the_real_host_reads_as_a_share():
    before = host_cpu.jiffies()
    if before is None:
        pytest.skip("no /proc/stat on this host")
    sum(i * i for i in range(200_000))
    busy = host_cpu.busy_since(before)
    assert busy is None or 0.0 <= busy <= 1.0


def _run(*busy, workload="throughput balanced"):
    return {"perf": {"timeline": [{"workload": workload, "host_busy": b} for b in busy]}}


def test_a_timed_call_during_other_work_is_named():
    """Session 43: one lane's timed runs slowed while the other lane compiled on the same host."""
    runs = {"baseline": [_run(0.05, 0.41), _run(0.04)], "candidate": [_run(0.05), _run(0.06)]}
    assert host_cpu.findings(runs) == [
        "the host's CPUs were busier during some timed runs than the median 5% of this scenario's (other work on the "
        "machine can slow a run): round 1 baseline throughput balanced 41%"]
    # session 44: a process's repeats of one workload, each busy, once with their count, the busiest first
    runs["candidate"] = [_run(0.05), _run(0.06, 0.05, 0.2, 0.19, 0.06, 0.05)]
    assert host_cpu.findings(runs)[0].endswith(
        "round 1 baseline throughput balanced 41%, round 2 candidate throughput balanced 20% (2 repeats)")


def test_nothing_is_said_of_an_even_load_or_unknown_one():
    assert host_cpu.findings({"baseline": [_run(0.5, 0.55)], "candidate": [_run(0.52)]}) == []
    assert host_cpu.findings({"baseline": [_run(None, None)], "candidate": [{}]}) == []


def test_one_process_against_the_others_in_a_results_row():
    row = {"baseline": {"timeline": [{"workload": "latency batch1", "host_busy": 0.2}]},
           "candidate": {"timeline": [{"workload": "latency batch1", "host_busy": 0.6},
                                      {"workload": "latency batch1", "host_busy": 0.5}]}}
    assert host_cpu.during(row, "candidate", 1, "latency batch1") == (
        "; the host's CPUs 60% busy during it, 20% in the other runs of it")
    assert host_cpu.during(row, "candidate", 1, "throughput w") == ""  # no record of that workload
    assert host_cpu.during({}, "baseline", 1, "latency batch1") == ""


def test_steal_comes_from_proc_stat_and_a_timed_call_that_lost_time_to_the_hypervisor_is_named(monkeypatch):
    """Session 57: one H100 VM's engine processes ran their host work 0.6x-1.3x as fast as each other's; a VM's steal
    time during each timed call says whether its hypervisor took the difference."""
    reads = iter([(10, 1000), (30, 1100)])
    monkeypatch.setattr(host_cpu, "stolen", lambda: next(reads))
    assert host_cpu.steal_since(host_cpu.stolen()) == 0.2
    monkeypatch.undo()
    real = host_cpu.stolen()
    assert real is None or 0 <= real[0] <= real[1]

    def run(busy, steal):
        return {"perf": {"timeline": [{"workload": "latency batch1", "host_busy": busy, "host_steal": steal}]}}
    runs = {"baseline": [run(0.07, 0.0)], "candidate": [run(0.08, 0.12)]}
    assert host_cpu.findings(runs) == [
        "the hypervisor took part of the host's CPU time (steal) during some timed runs (another VM's work can slow "
        "a run): candidate latency batch1 12.0%"]
    row = {"baseline": runs["baseline"][0]["perf"], "candidate": runs["candidate"][0]["perf"]}
    assert host_cpu.during(row, "candidate", 1, "latency batch1") == (
        "; the host's CPUs 8% busy during it, the hypervisor took 12.0% of their time (steal), 7% in the other runs "
        "of it")
    assert "hypervisor" not in host_cpu.during(row, "baseline", 1, "latency batch1")
