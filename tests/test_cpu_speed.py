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
    assert line.startswith("host CPUs: 4, the same Python work at best 10.0-13.0 ms a CPU (slowest CPU 1, x1.30 the "
                           "fastest)")
    assert line.endswith(": NOT alike: two engine processes of a comparison may run their host work at different "
                         "speeds; bind both sides to the same CPUs, e.g. FK_BIND_CPUS=0,2")
    back = json.loads(json.dumps(s))  # fk doctor's report comes back as JSON: the CPUs as strings
    assert cpu_speed.fastest(back, 3) == [0, 2, 3] and cpu_speed.words(back) == line


def test_slow_passes_that_move_between_cpus_are_a_wandering_speed_not_a_slow_cpu():
    """Session 58's survey of an H100 VM (three of its CPUs, ms a pass): no CPU steadily slower, but passes at up to
    twice their CPU's best, now on one CPU, then on another; binding to "the fastest" cannot take that out."""
    s = {"ms": {5: [19.48, 9.14, 9.14, 9.07], 7: [9.05, 9.19, 16.98, 17.59], 9: [9.06, 9.00, 9.06, 9.07]},
         "steal": 0.0}
    assert round(cpu_speed.spread(s), 3) == round(9.07 / 9.00, 3)
    assert cpu_speed.wander(s) == {"passes": 3, "of": 12, "cpus": 2, "worst": 19.48 / 9.07}
    line = cpu_speed.words(s)
    assert ": alike; the speed wanders: 3 of 12 passes on 2 CPU(s) took up to x2.15 their CPU's best" in line
    assert "FK_BIND_CPUS" not in line and "--with-aa" in line


def test_steady_passes_do_not_wander():
    s = {"ms": {0: [10.0, 10.5, 10.2], 1: [13.0, 13.1, 13.0]}, "steal": None}
    assert cpu_speed.wander(s) == {"passes": 0, "of": 6, "cpus": 0, "worst": 1.0}
    assert "wanders" not in cpu_speed.words(s) and "NOT alike" in cpu_speed.words(s)


def test_cpus_within_ten_percent_run_alike(monkeypatch):
    _host(monkeypatch, {0: 0.010, 1: 0.0105})
    assert cpu_speed.words(cpu_speed.survey(passes=1)).endswith("x1.05 the fastest): alike")


def test_the_real_host_is_surveyed_and_its_affinity_kept():
    before = os.sched_getaffinity(0)
    s = cpu_speed.survey(passes=1, reps=1)
    assert set(s["ms"]) == before and os.sched_getaffinity(0) == before
    assert all(v[0] > 0 for v in s["ms"].values()) and cpu_speed.spread(s) >= 1.0
