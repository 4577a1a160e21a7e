"""fk check's guards on CPU: the honest kernel passes, each cheating kernel is caught by its guard."""
import time

import pytest
import torch

from fk_adapters.call_signature import describe
from fk_adapters.check import driver, guards, timing
from fk_adapters.tasks import SLOTS

from . import cheaters

SILU, RMS = SLOTS["silu_and_mul"], SLOTS["rms_norm"]


def _sig(slot, case=1):
    return describe(slot.make_inputs(slot.cases[case], torch.float32, "cpu", torch.Generator().manual_seed(0)))


def _round(slot, cand, **kw):
    problems, _, _ = driver.correctness_round(slot, _sig(slot), cand, slot.reference, "cpu", seed=3, **kw)
    return problems


@pytest.fixture(autouse=True)
def _restore_clock():
    real = time.perf_counter
    yield
    time.perf_counter = real


def test_the_reference_itself_passes_every_guard():
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    for slot in SLOTS.values():
        sig = _sig(slot, 0)
        row = driver.check_signature(slot, sig, slot.reference, slot.reference, "cpu", clock,
                                     {"rounds": 2, "warmup": 1, "repeats": 4}, seed=0)
        assert row["problems"] == [], (slot.name, row["problems"])
        if slot.untimed:  # judged, never timed (all_reduce: one process plays every rank)
            assert row["untimed"] == slot.untimed and "speedup" not in row
            continue
        assert row["speedup"] > 0 and row["candidate"]["n"] == 4 and row["traffic_bytes"] > 0


def test_cached_output_is_caught_on_the_second_round():
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    row = driver.check_signature(SILU, _sig(SILU), cheaters.CachedOutput(), SILU.reference, "cpu", clock,
                                 {"rounds": 3}, seed=0)
    assert any("cached output" in p for p in row["problems"]), row["problems"]


def test_input_mutation_is_caught():
    assert any("argument #0 was modified" in p for p in _round(RMS, cheaters.mutates_input))


def test_zero_output_is_caught():
    assert _round(SILU, cheaters.zero_output) == ["all-zero result against a non-zero reference"]


def test_work_left_on_another_thread_is_caught():
    try:
        problems = _round(SILU, cheaters.background_thread)
    finally:
        for t in cheaters.THREADS:
            t.join()
    assert any("left thread(s) running" in p and "cheat-fill" in p for p in problems), problems


def test_torch_compile_pool_thread_is_not_the_candidates():
    from torch._inductor.compile_worker.timer import Timer

    timers = []

    def engine_compiles_meanwhile(x):
        timers.append(Timer(60, lambda: None))
        timers[-1].record_call()  # what torch's compile pool does when a job is submitted
        return SILU.reference(x)

    try:
        assert _round(SILU, engine_compiles_meanwhile) == []
    finally:
        for t in timers:
            t.quit()


def test_replaced_timing_function_is_caught():
    integrity = guards.TimingIntegrity()
    clock = timing.Clock("cpu", integrity.saved)
    row = driver.check_signature(SILU, _sig(SILU), cheaters.PatchesTiming(), SILU.reference, "cpu", clock,
                                 {"rounds": 1, "warmup": 1, "repeats": 3}, seed=0, integrity=integrity)
    assert row["problems"] == ["time.perf_counter was replaced"]
    assert row["candidate"]["median_s"] > 1e-7  # still measured with the saved clock, not the patched one


def test_fake_or_broadcast_result_is_caught():
    assert any("zero stride" in p for p in _round(SILU, cheaters.fake_tensor))
    problems = _round(SILU, lambda x: torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), device="meta"))
    assert any("device meta" in p for p in problems), problems


def test_tensor_subclass_result_is_caught():
    class Lazy(torch.Tensor):
        pass

    problems = _round(SILU, lambda x: SILU.reference(x).as_subclass(Lazy))
    assert problems and "not a plain torch.Tensor" in problems[0], problems


def test_unwritten_poisoned_result_fails_as_nan():
    got = torch.full((4, 8), float("nan"))
    got[:2] = 1.0
    problems, _ = guards.compare(got, torch.ones(4, 8), torch.ones(4, 8, dtype=torch.float64), "float32")
    assert problems and "NaN/Inf" in problems[0]


def test_result_aliasing_an_input_is_caught():
    assert any("shares memory" in p for p in _round(RMS, lambda x, w, eps: x.copy_(RMS.reference(x.clone(), w, eps))))


def test_float64_reference_arbitrates_when_the_engine_is_off():
    exact = torch.linspace(1, 2, 16, dtype=torch.float64)
    engine = (exact + 0.05).float()  # the engine kernel is itself off
    problems, _ = guards.compare(exact.float(), engine, exact, "float32")
    assert problems == []  # closer to the exact answer than the engine: not the candidate's fault
    problems, _ = guards.compare((exact - 0.06).float(), engine, exact, "float32")
    assert problems and "outside" in problems[0]


def test_rare_outliers_within_twice_the_tolerance_pass_and_no_more():
    exact = torch.full((100_000,), 1.5, dtype=torch.float64)
    engine = exact.float()  # tolerance here: 1e-5 + 1e-3 * 1.5 = 1.51e-3
    near = engine.clone()
    near[::20_000] += 0.002  # 5 of 100k elements, 1.3x the tolerance
    assert guards.compare(near, engine, exact, "float32")[0] == []
    many = engine.clone()
    many[::5_000] += 0.002  # 20 of 100k: more than 0.01%
    assert "outside" in guards.compare(many, engine, exact, "float32")[0][0]
    far = engine.clone()
    far[0] += 0.01  # a single element, but 5x the tolerance
    problems, stats = guards.compare(far, engine, exact, "float32")
    assert problems and "1 of them beyond" in problems[0] and stats["bad"] == 1


def test_a_few_ulps_at_a_cancellation_pass_when_no_worse_than_the_engines_worst_element():
    """Summation order moves a long dot product that sums to near zero by a few ulps in either kernel: an element no
    farther from float64 than the engine's worst passes, if the result is about as accurate overall."""
    exact = torch.linspace(1, 2, 100_000, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    engine = (exact + 1e-4 * torch.randn(exact.shape, generator=gen, dtype=torch.float64)).float()  # rounding noise
    engine[7] += 0.02  # the engine's own worst element (a cancellation it rounded badly)
    cand = (exact + 1e-4 * torch.randn(exact.shape, generator=gen, dtype=torch.float64)).float()
    cand[[11, 500, 9000]] += 0.015  # three elements beyond 2x the tolerance of the engine, no worse than its 0.02
    problems, stats = guards.compare(cand, engine, exact, "float32")
    assert problems == [] and stats["forgiven"] == 3
    cand[[11]] += 0.01  # now farther from float64 than anything the engine got wrong
    problems, _ = guards.compare(cand, engine, exact, "float32")
    assert problems and "beyond" in problems[0]


def test_errors_spread_within_the_engines_worst_element_fail_as_less_accurate():
    exact = torch.linspace(1, 2, 10_000, dtype=torch.float64)
    engine = exact.float()
    engine[7] += 0.02
    cand = exact.float()
    cand[::2] += 0.015  # half the result off by 10x the tolerance: inside the engine's worst, not its accuracy
    problems, _ = guards.compare(cand, engine, exact, "float32")
    assert problems and "less accurate than the engine overall" in problems[0]


def test_escape_ratio_rule():
    assert guards.escaped(1.1, 1.05) == []
    assert guards.escaped(20.0, 1.1) and "escapes the timed stream" in guards.escaped(20.0, 1.1)[0]


def test_in_place_slot_must_return_none():
    slot = SLOTS["fused_add_rms_norm"]

    def returns_something(x, residual, weight, eps):
        slot.reference(x, residual, weight, eps)
        return x

    assert any("must return None" in p for p in _round(slot, returns_something))


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
def test_on_gpu_uninitialised_result_is_poisoned_and_caught():
    sig = describe(SILU.make_inputs(SILU.cases[-1], torch.bfloat16, "cuda", torch.Generator().manual_seed(0)))
    problems, _, _ = driver.correctness_round(SILU, sig, cheaters.uninitialised, SILU.reference, "cuda", seed=1)
    assert problems and ("NaN/Inf" in problems[0] or "outside" in problems[0]), problems


@pytest.mark.gpu
@gpu
def test_on_gpu_side_stream_work_is_caught():
    """A big enough shape that the GPU work outweighs the launches, so escaping the timed stream pays."""
    sig = describe(SILU.make_inputs({"tokens": 4096, "d": 14336}, torch.bfloat16, "cuda",
                                    torch.Generator().manual_seed(0)))
    clock = timing.Clock("cuda", guards.TimingIntegrity().saved)
    row = driver.check_signature(SILU, sig, cheaters.SideStream(honest_calls=3), SILU.reference, "cuda", clock,
                                 {"rounds": 3, "warmup": 2, "repeats": 10}, seed=0)
    assert any("escapes the timed stream" in p for p in row["problems"]), row


@pytest.mark.gpu
@gpu
def test_on_gpu_honest_triton_kernel_passes_with_sane_timing():
    """CUDA path end to end: events, L2 flush, rotating buffers, copy ceiling, escape ratio."""
    from fk_triton_kernels import plugin

    kernels = {k.slot: k.fn for k in plugin.fk_kernels(engine="vllm", device="cuda")}
    integrity = guards.TimingIntegrity()
    clock = timing.Clock("cuda", integrity.saved)
    ceiling = timing.copy_ceiling(clock)
    assert 5e11 < ceiling < 2e13  # bytes/s: a real device copy, not a broken clock
    sig = describe(RMS.make_inputs({"tokens": 4096, "hidden": 4096}, torch.bfloat16, "cuda",
                                   torch.Generator().manual_seed(0)))
    row = driver.check_signature(RMS, sig, kernels["rms_norm"], RMS.reference, "cuda", clock,
                                 {"rounds": 2, "warmup": 5, "repeats": 20}, seed=0, integrity=integrity)
    assert row["problems"] == [], row["problems"]
    assert row["buffer_sets"] >= 2 and 0 < row["candidate_Bps"] < 1.05 * ceiling
    assert row["wall_over_span"]["candidate"] < 1.5
    assert clock.spin_s > 0 and row["host"]["candidate"]["n"] == 20  # device time behind a spin; host time apart
