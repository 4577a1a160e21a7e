"""cpu_speed: the same Python work timed on each CPU in turn; whether the host's CPUs run alike."""
import json
import os

from fk_adapters import cpu_speed, host_cpu


def _host(monkeypatch, speeds: dict[int, float]):
    """A host whose CPU c runs the work in speeds[c] seconds; the affinity each call asked is kept."""
    pinned = {"cpus": set(speeds)}
    monkeypatch.setattr(cpu_speed.os, "sched_getaffinity", lambda pid: set(speeds))
    monkeypatch.setattr(cpu_speed.os, "sched_setaffinity", lambda pid, cpus: pinned.update(cpus=set(cpus)))
    monkeypatch.setattr(cpu_speed, "work", lambda: speeds[min(pinned["cpus"])] if len(pinned["cpus"]) == 1 else 0.0)
    monkeypatch.setattr(host_cpu, "stolen", lambda: None)
    return pinned


def test_a_host_whose_cpus_differ_is_named_with_the_cpus_to_bind(monkeypatch):
    """Session 57: one H100 VM's engine processes ran their host work 0.6x-1.3x as fast as each other's."""
    pinned = _host(monkeypatch, {0: 0.010, 1: 0.013, 2: 0.010, 3: 0.0101})
    s = cpu_speed.survey(passes=2)
    assert pinned["cpus"] == {0, 1, 2, 3}  # every CPU given back afterwards
    assert s["ms"] == {0: [10.0, 10.0], 1: [13.0, 13.0], 2: [10.0, 10.0], 3: [10.1, 10.1]} and s["steal"] is None
    assert round(cpu_speed.spread(s), 2) == 1.3 and cpu_speed.fastest(s, 2) == [0, 2]
    line = cpu_speed.words(s)
    assert line.startswith("host CPUs: 4, the same Python work 10.0-13.0 ms a CPU (slowest CPU 1, x1.30 the fastest)")
    assert line.endswith(": NOT alike: two engine processes of a comparison may run their host work at different "
                         "speeds; bind both sides to the same CPUs, e.g. FK_BIND_CPUS=0,2")
    back = json.loads(json.dumps(s))  # fk doctor's report comes back as JSON: the CPUs as strings
    assert cpu_speed.fastest(back, 3) == [0, 2, 3] and cpu_speed.words(back) == line


def test_cpus_within_ten_percent_run_alike(monkeypatch):
    _host(monkeypatch, {0: 0.010, 1: 0.0105})
    assert cpu_speed.words(cpu_speed.survey(passes=1)).endswith("x1.05 the fastest): alike")


def test_the_real_host_is_surveyed_and_its_affinity_kept():
    before = os.sched_getaffinity(0)
    s = cpu_speed.survey(passes=1, reps=1)
    assert set(s["ms"]) == before and os.sched_getaffinity(0) == before
    assert all(v[0] > 0 for v in s["ms"].values()) and cpu_speed.spread(s) >= 1.0
