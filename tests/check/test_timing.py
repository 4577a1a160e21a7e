"""fk check's clock: the GPU spin that hides a launch grows with the launch."""
from fk_adapters.check import guards, timing


def test_the_spin_covers_a_launch_with_half_of_it_to_spare_within_a_cap():
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    assert clock.spins_for(1.0) == 1  # no spin on CPU
    clock.spin_s = 300e-6
    assert clock.spins_for(50e-6) == 1  # an ordinary launch: the base spin
    assert clock.spins_for(900e-6) == 5  # 1.5 x 900 µs = 1350 µs: five spins of 300
    assert clock.spins_for(10.0) == clock.MAX_SPINS


def test_bench_pair_times_each_function_behind_its_own_spin(monkeypatch):
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    times, host, spun = timing.bench_pair(clock, {"a": lambda x: x, "b": lambda x: x}, [(1,), (2,)], 3, 4)
    assert {n: len(t) for n, t in times.items()} == {"a": 4, "b": 4} and spun == {"a": 0.0, "b": 0.0}
    clock.spin_s = 1e-3  # as on a GPU: a launch of ~3 ms gets five spins of 1 ms
    slow = iter([0.0, 3e-3] * 100)
    monkeypatch.setitem(clock.saved, "time.perf_counter", lambda: next(slow))
    _, _, spun = timing.bench_pair(clock, {"slow": lambda x: x}, [(1,)], 3, 0)
    assert spun == {"slow": 5e-3}


def _fake_gpu_clock(monkeypatch, timed_launch_s: float):
    """A clock whose warm-up launches take no time and whose timed launches take ``timed_launch_s``; it records
    the spins each timed call went behind."""
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    clock.spin_s = 1e-3
    monkeypatch.setitem(clock.saved, "time.perf_counter", lambda: 0.0)
    seen: list[list[int]] = []

    def time_calls(calls, host=None, spins=None):
        seen.append(list(spins))
        host.extend([timed_launch_s] * len(calls))
        return [1e-4] * len(calls)

    monkeypatch.setattr(clock, "time_calls", time_calls)
    return clock, seen


def test_a_launch_slower_when_timed_than_in_its_warm_up_is_timed_again_behind_a_spin_that_covers_it(monkeypatch):
    clock, seen = _fake_gpu_clock(monkeypatch, 3e-3)
    times, host, spun = timing.bench_pair(clock, {"f": lambda x: x}, [(1,)], 2, 3)
    assert seen == [[1]] * 3 + [[5]] * 3  # 1.5 x 3 ms behind spins of 1 ms: five
    assert spun == {"f": 5e-3} and len(times["f"]) == len(host["f"]) == 3


def test_a_launch_the_warm_up_spin_covers_is_timed_once(monkeypatch):
    clock, seen = _fake_gpu_clock(monkeypatch, 0.5e-3)
    _, _, spun = timing.bench_pair(clock, {"f": lambda x: x}, [(1,)], 2, 3)
    assert seen == [[1]] * 3 and spun == {"f": 1e-3}
