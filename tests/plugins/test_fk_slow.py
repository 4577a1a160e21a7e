"""The slow-on-purpose plugin (plugins/fk-slow): the engine's own results, plus a known delay per call."""
from __future__ import annotations

import importlib
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _cuda_graph import capture_and_replay, clone_args  # noqa: E402

from fk_adapters.tasks import SLOTS

_PLUGIN_SRC = Path(__file__).resolve().parents[2] / "plugins" / "fk-slow"
if importlib.util.find_spec("fk_slow") is None:  # not installed: use the source tree
    sys.path.insert(0, str(_PLUGIN_SRC))

import fk_slow  # noqa: E402

SLOT_NAMES = ("rms_norm", "fused_add_rms_norm")
CASES = [(name, i) for name in SLOT_NAMES for i in range(len(SLOTS[name].cases))]


def _installed() -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("fk-slow")
    except PackageNotFoundError:
        return False
    return True


needs_install = pytest.mark.skipif(not _installed(), reason="fk-slow is not installed (tested from the source tree)")


def _results(out, args):
    """The return value (if any) followed by every tensor argument as it is after the call."""
    return ((out,) if out is not None else ()) + tuple(a for a in args if isinstance(a, torch.Tensor))


def _assert_identical(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert torch.equal(g, w)


def _run_both(name, fn, args, native=None):
    slot = SLOTS[name]
    native = native or slot.reference
    mine, ref = clone_args(args), clone_args(args)
    got = fn(*mine)
    want = native(*ref)
    if slot.in_place:
        assert got is None
    return _results(got, mine), _results(want, ref)


def _median_s(fn, args, n=7):
    times = []
    for _ in range(n):
        a = clone_args(args)
        t0 = time.perf_counter()
        fn(*a)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


@pytest.fixture
def reload_with_env(monkeypatch):
    """Re-import fk_slow with FK_SLOW_US set to a value (the variable is read at load); restored after."""

    def load(value):
        if value is None:
            monkeypatch.delenv(fk_slow.ENV, raising=False)
        else:
            monkeypatch.setenv(fk_slow.ENV, value)
        return importlib.reload(fk_slow)

    yield load
    monkeypatch.undo()
    importlib.reload(fk_slow)


# ----------------------------------------------------------------------------- FK_SLOW_US

@pytest.mark.parametrize("text,us", [(None, 20.0), ("", 20.0), ("  ", 20.0), ("20", 20.0), (" 35 ", 35.0),
                                     ("2.5", 2.5), ("0", 0.0), ("1e3", 1000.0), ("1000000", 1e6)])
def test_delay_parsing_accepts_microseconds(text, us):
    assert fk_slow.parse_delay_us(text) == us


@pytest.mark.parametrize("text", ["abc", "20us", "-1", "-0.5", "nan", "inf", "-inf", "1e7", "1,5", "0x10"])
def test_delay_parsing_rejects_bad_values_clearly(text):
    with pytest.raises(fk_slow.DelayError, match=r"FK_SLOW_US=") as exc:
        fk_slow.parse_delay_us(text)
    assert repr(text) in str(exc.value) and "microseconds" in str(exc.value)
    assert isinstance(exc.value, ValueError)


def test_delay_is_read_once_at_load(reload_with_env):
    mod = reload_with_env("7.5")
    assert mod.DELAY_US == 7.5
    assert mod.fk_plugin_info()["delay_us"] == 7.5
    assert {k.extra["delay_us"] for k in mod.fk_kernels(engine="vllm", device="cpu")} == {7.5}
    assert reload_with_env(None).DELAY_US == fk_slow.DEFAULT_US == 20.0


def test_bad_value_fails_the_load(reload_with_env):
    with pytest.raises(ValueError, match=r"FK_SLOW_US='fast' is not a number of microseconds") as exc:
        reload_with_env("fast")
    assert type(exc.value).__name__ == "DelayError"  # the class of the re-import


# ----------------------------------------------------------------------------- results

@pytest.mark.parametrize("delay_us", [0.0, 5.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,index", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_output_is_the_engine_ops_bit_for_bit(name, index, dtype, delay_us):
    """The kernel is the native op (here the slot reference) itself: every output, in-place ones too, identical."""
    slot = SLOTS[name]
    (kern,) = [k for k in fk_slow.kernels(delay_us) if k.slot == name]
    fn = kern.factory(slot.reference)
    args = slot.make_inputs(slot.cases[index], dtype, "cpu", torch.Generator().manual_seed(index))
    got, want = _run_both(name, fn, args)
    _assert_identical(got, want)


def test_native_is_called_with_the_arguments_unchanged():
    seen = []

    def native(*args):
        seen.append(args)
        return "out"

    x = torch.zeros(2, 4)
    assert fk_slow.slowed(native, 0.0)(x, None, 1e-6) == "out"
    assert len(seen) == 1 and seen[0][0] is x and seen[0][1:] == (None, 1e-6)


# ----------------------------------------------------------------------------- the delay on CPU

@pytest.mark.parametrize("name", SLOT_NAMES)
def test_call_takes_at_least_the_delay_on_cpu(name, reload_with_env):
    """With FK_SLOW_US set at load, each CPU call lasts at least that long (busy-wait), and not much longer."""
    delay_us = 3000.0
    mod = reload_with_env(str(delay_us))
    slot = SLOTS[name]
    (kern,) = [k for k in mod.fk_kernels(engine="vllm", device="cpu") if k.slot == name]
    slow = kern.factory(slot.reference)
    args = slot.make_inputs(slot.cases[1], torch.float32, "cpu", torch.Generator().manual_seed(0))
    base_med, _ = _median_s(slot.reference, args)
    slow_med, slow_min = _median_s(slow, args)
    assert slow_min >= delay_us * 1e-6  # a spin on the same clock: never shorter
    assert slow_med - base_med >= 0.95 * delay_us * 1e-6
    assert slow_med < base_med + delay_us * 1e-6 + 0.25  # generous: shared CI machines


def test_zero_delay_adds_nothing_measurable():
    slot = SLOTS["rms_norm"]
    args = slot.make_inputs(slot.cases[1], torch.float32, "cpu", torch.Generator().manual_seed(0))
    fast = fk_slow.slowed(slot.reference, 0.0)
    slow = fk_slow.slowed(slot.reference, 2000.0)
    assert _median_s(slow, args)[1] - _median_s(fast, args)[0] >= 0.95 * 2000e-6


def test_busy_wait_is_a_lower_bound():
    for us in (50.0, 500.0, 2000.0):
        t0 = time.perf_counter()
        fk_slow.busy_wait(us)
        assert time.perf_counter() - t0 >= us * 1e-6


# ----------------------------------------------------------------------------- through fk's op and compile

def test_through_fk_custom_op_counted_and_compiled():
    """As fk installs it: an opaque torch op ``fk_slow::<slot>`` whose body the probe counts; torch.compile
    (fullgraph) traces the op's fake only, and the compiled function still pays the delay on every call."""
    from fk_adapters import ops, probe
    from fk_adapters.engines.loading import kernel_callable

    delay_us = 2000.0
    natives = {name: SLOTS[name].reference for name in SLOT_NAMES}
    plugin = "slow-test"  # its own op namespace: the ops registry is per process
    wrapped = {k.slot: ops.wrap(plugin, SLOTS[k.slot], kernel_callable(k, natives), k.dtypes)
               for k in fk_slow.kernels(delay_us)}
    slot = SLOTS["rms_norm"]
    x, w, eps = slot.make_inputs(slot.cases[1], torch.float32, "cpu", torch.Generator().manual_seed(3))
    key = ops.op_key(plugin, "rms_norm")
    before = probe.calls[key]
    assert torch.equal(wrapped["rms_norm"](x, w, eps), slot.reference(x, w, eps))
    assert probe.calls[key] == before + 1

    fslot = SLOTS["fused_add_rms_norm"]
    fx, fr, fw, feps = fslot.make_inputs(fslot.cases[1], torch.float32, "cpu", torch.Generator().manual_seed(4))

    def block(x, r, w, eps):
        h = x * 2.0
        wrapped["fused_add_rms_norm"](h, r, w, eps)
        return wrapped["rms_norm"](h, w, eps) + 1.0

    def eager_block(x, r, w, eps):
        h = x * 2.0
        fslot.reference(h, r, w, eps)
        return slot.reference(h, w, eps) + 1.0

    torch._dynamo.reset()
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    r1, r2 = fr.clone(), fr.clone()
    assert torch.equal(compiled(fx, r1, fw, feps), eager_block(fx, r2, fw, feps))
    assert torch.equal(r1, r2)  # the in-place residual write survives functionalization
    assert probe.traced[ops.op_key(plugin, "fused_add_rms_norm")] >= 1
    calls = probe.calls[key]
    t0 = time.perf_counter()
    compiled(fx, fr.clone(), fw, feps)
    assert time.perf_counter() - t0 >= 2 * delay_us * 1e-6  # two slowed calls
    assert probe.calls[key] == calls + 1


# ----------------------------------------------------------------------------- declarations

def test_fk_kernels_declares_both_norm_slots():
    declared = fk_slow.kernels(20.0)
    assert [k.slot for k in declared] == list(SLOT_NAMES)
    for k in declared:
        k.validate(SLOTS)
        assert k.factory is not None and k.fn is None
        assert k.devices == ("cuda", "cpu") and k.cuda_graph_safe and k.compile_safe
        assert k.kernel_names == ()  # ATen's spin_kernel is not the plugin's: it cannot prove the plugin ran
        assert k.name == f"engine:{k.slot}+20us"


def test_hooks_through_pluggy():
    import pluggy

    from fk_adapters import hookspec

    pm = pluggy.PluginManager(hookspec.PROJECT)
    pm.add_hookspecs(hookspec)
    pm.register(fk_slow)
    pm.check_pending()
    (info,) = pm.hook.fk_plugin_info()
    assert info["delay_us"] == fk_slow.DELAY_US and info["delay_env"] == "FK_SLOW_US"
    (declared,) = pm.hook.fk_kernels(engine="sglang", device="cpu")
    assert sorted(k.slot for k in declared) == sorted(SLOT_NAMES)


@needs_install
def test_entry_point_and_name_resolution():
    from importlib.metadata import distribution

    from fk_adapters.plugins import load_plugins, select_kernels

    eps = [ep for ep in distribution("fk-slow").entry_points if ep.group == "fk_adapters"]
    assert [(ep.name, ep.value) for ep in eps] == [("slow", "fk_slow")]
    (p,) = load_plugins(["slow"], strict=True, engine="vllm", device="cpu")
    assert p.dist == "fk-slow" and not p.error and p.source_sha256
    chosen, _ = select_kernels([p], "vllm", "cpu")
    assert sorted(chosen) == sorted(SLOT_NAMES)


@needs_install
def test_bad_env_is_a_clear_load_error_in_fk():
    """A fresh process (the variable is read at load): `fk plugins` reports it; strict mode stops."""
    code = ("from fk_adapters.plugins import load_plugins, PluginLoadError\n"
            "(p,) = load_plugins(['slow'])\nprint('ERROR:', p.error)\n"
            "try:\n    load_plugins(['slow'], strict=True)\nexcept PluginLoadError as e:\n    print('STRICT:', e)\n")
    env = dict(os.environ, FK_SLOW_US="-3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert "ERROR: DelayError: FK_SLOW_US='-3'" in out.stdout
    assert "STRICT: plugin 'slow' failed to load: DelayError: FK_SLOW_US='-3'" in out.stdout


# ----------------------------------------------------------------------------- GPU only

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _cuda_ms(fn, n=20):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(n):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


@pytest.mark.gpu
@gpu
def test_sm_clock_is_known_on_gpu():
    mhz, source = fk_slow.cycles_per_us(torch.cuda.current_device())
    assert 100 < mhz < 5000 and source != "fallback", (mhz, source)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", SLOT_NAMES)
def test_gpu_output_identical_and_delay_on_device(name, dtype):
    slot, delay_us = SLOTS[name], 200.0
    args = slot.make_inputs(slot.cases[-1], dtype, "cuda", torch.Generator().manual_seed(0))
    slow = fk_slow.slowed(slot.reference, delay_us)
    got, want = _run_both(name, slow, args)
    _assert_identical(got, want)
    base = _cuda_ms(lambda: slot.reference(*args))
    slowed = _cuda_ms(lambda: slow(*args))
    assert (slowed - base) * 1000 >= 0.9 * delay_us, (base, slowed)
    assert (slowed - base) * 1000 < 3 * delay_us, (base, slowed)


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("name", SLOT_NAMES)
def test_gpu_graph_capture_replays_the_delay(name):
    slot, delay_us = SLOTS[name], 100.0
    slow = fk_slow.slowed(slot.reference, delay_us)
    graph, got, want = capture_and_replay(slot, slow, slot.cases[-1])
    _assert_identical(got, want)
    assert _cuda_ms(graph.replay) * 1000 >= 0.9 * delay_us


@pytest.mark.gpu
@gpu
def test_gpu_profiler_shows_the_delay_kernel():
    from torch.profiler import ProfilerActivity, profile

    slot = SLOTS["rms_norm"]
    (kern,) = [k for k in fk_slow.kernels(10.0) if k.slot == "rms_norm"]
    fn = kern.factory(slot.reference)
    args = slot.make_inputs(slot.cases[0], torch.float32, "cuda", torch.Generator().manual_seed(0))
    fn(*args)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    names = {e.name for e in prof.events()}
    assert any(fk_slow.SPIN_KERNEL in n for n in names), sorted(names)
