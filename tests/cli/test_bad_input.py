"""Bad input that would cost a run or read as a failing kernel: one line and exit 2, before any engine starts."""
import json
import os

import pytest

from fk_adapters.cli.main import main

TINY = ["--scenario", "tiny-llama", "--device", "cpu"]


@pytest.fixture
def no_engine(monkeypatch):
    """Any engine process, run, capture or check that starts fails the test."""
    from fk_adapters import capture, engines
    from fk_adapters.check import runner as check_runner
    from fk_adapters.cli import capture_cmd, run_cmd
    from fk_adapters.runner import engine_process, proc

    def started(*a, **k):
        raise AssertionError("an engine started")

    for mod, name in ((proc, "run_job"), (engine_process, "run_job"), (capture, "run_job"), (check_runner, "run_job"),
                      (run_cmd, "run_suite"), (capture_cmd, "capture"), (check_runner, "run_check")):
        monkeypatch.setattr(mod, name, started)
    monkeypatch.setattr(engines, "check_installed", lambda spec: "0.0")


def refused(capsys, argv, message):
    """``fk argv`` exits 2 with one line of stderr that holds ``message``, and no traceback."""
    capsys.readouterr()
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, (argv, err)


@pytest.fixture
def workload(tmp_path):
    path = tmp_path / "wl.json"
    path.write_text(json.dumps({"scenario": "w", "slots": {}}))
    return str(path)


def _bad_outs(tmp_path):
    """(folder, reason) that cannot be written: under a regular file, under /sys, in a read-only folder."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    outs = [(str(a_file / "out"), "cannot write there"), (str(a_file), "is a file"),
            ("/sys/fk-out", "cannot write there")]
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o555)
        outs.append((str(ro / "out"), "cannot write there (Permission denied)"))
    else:  # root writes through modes: a name no file system takes instead
        outs.append((str(tmp_path / ("x" * 300)), "cannot write there (File name too long)"))
    return outs


def test_an_unwritable_out_is_refused_by_every_command_that_writes(no_engine, capsys, tmp_path, workload):
    (tmp_path / "r.json").write_text("{}")
    for out, reason in _bad_outs(tmp_path):
        for argv in (["run", "--plugins", "passthrough", *TINY, "--out", out],
                     ["capture", "--engine", "vllm", *TINY, "--out", out],
                     ["check", "--plugins", "passthrough", "--workload", workload, "--device", "cpu", "--out", out],
                     ["compare", str(tmp_path / "r.json"), str(tmp_path / "r.json"), "--out", out],
                     ["coverage", "--out", out]):
            refused(capsys, argv, f"--out {out}: {reason}")
    (tmp_path / "results.json").write_text(json.dumps({"engine": "vllm", "scenarios": []}))
    for output, reason in (("/sys/fk-report/report.md", "cannot write there"), (str(tmp_path), "is a folder")):
        refused(capsys, ["report", str(tmp_path / "results.json"), "-o", output], f"-o {output}")
        refused(capsys, ["report", str(tmp_path / "results.json"), "-o", output], reason)


def test_the_out_check_leaves_no_folder_behind(no_engine, capsys, tmp_path):
    out = tmp_path / "new" / "deeper"
    refused(capsys, ["run", "--plugins", "no_such_plugin", *TINY, "--out", str(out)], "not installed")
    assert not (tmp_path / "new").exists()


def test_a_timeout_of_zero_or_below_is_refused(no_engine, capsys, tmp_path, workload):
    out = str(tmp_path / "o")
    for t in ("-5", "0", "nan"):
        for argv in (["run", "--plugins", "passthrough", *TINY],
                     ["capture", "--engine", "vllm", *TINY],
                     ["check", "--plugins", "passthrough", "--workload", workload, "--device", "cpu"]):
            refused(capsys, [*argv, "--out", out, "--timeout", t], "--timeout must be a number of seconds above 0")


def test_run_flags_that_contradict_each_other_are_refused(no_engine, capsys, tmp_path):
    base = ["run", "--plugins", "passthrough", *TINY, "--out", str(tmp_path / "o")]
    refused(capsys, [*base, "--interleave", "3", "--correctness-only"], "--correctness-only times nothing")
    refused(capsys, [*base, "--interleave", "3", "--baseline-from", str(tmp_path)], "cannot reuse --baseline-from")
    refused(capsys, [*base, "--interleave", "1"], "needs N >= 2 rounds")
    refused(capsys, [*base, "--with-aa"], "give --interleave N")  # on CPU: one process a side by default
    aa = ["run", "--aa", *TINY, "--out", str(tmp_path / "o")]
    refused(capsys, [*aa, "--interleave", "3", "--with-aa"], "--aa is already stock against stock")
    refused(capsys, [*base, "--time-budget", "600"], "limits the rounds of --interleave N")  # CPU: no rounds
    refused(capsys, [*base, "--interleave", "3", "--time-budget", "-1"], "--time-budget SECONDS (> 0)")


def test_check_counts_below_their_least_are_refused(no_engine, capsys, workload, tmp_path):
    base = ["check", "--plugins", "passthrough", "--workload", workload, "--device", "cpu", "--out", str(tmp_path)]
    for flag in ("--rounds", "--repeats"):
        refused(capsys, [*base, flag, "0"], f"{flag} must be at least 1")
    refused(capsys, [*base, "--warmup", "-1"], "--warmup must be at least 0")


@pytest.mark.parametrize("edit, message", [
    (("max_num_seqs = 8", "max_num_seqs = -3"), "[engine] max_num_seqs must be a positive integer"),
    (("output_len = 12", "output_len = 100000000"),
     "prompt_len + output_len = 100000024 exceeds [engine] max_model_len"),
    (("requests = 4", "requests = -1"), "[correctness] requests must be a positive integer"),
])
def test_a_scenario_with_impossible_numbers_is_refused(no_engine, capsys, tmp_path, edit, message):
    from fk_adapters import scenarios

    text = scenarios._builtin_dir().joinpath("tiny-llama.toml").read_text()
    assert edit[0] in text
    path = tmp_path / "bad.toml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    for argv in (["run", "--plugins", "passthrough"], ["capture", "--engine", "vllm"]):
        refused(capsys, [*argv, "--scenario", str(path), "--device", "cpu", "--out", str(tmp_path / "o")], message)


MISMATCHED = """
    from fk_adapters import Kernel, hookimpl

    def one_arg_norm(x):
        return x

    def two_arg_factory(native, extra):
        return native

    @hookimpl
    def fk_kernels(engine, device):
        return [Kernel(slot="rms_norm", fn=one_arg_norm, devices=("cpu",)),
                Kernel(slot="silu_and_mul", factory=two_arg_factory, devices=("cpu",))]
"""


def test_a_kernel_that_cannot_take_its_slots_arguments_is_refused(no_engine, make_plugin, capsys, tmp_path, workload):
    make_plugin("mismatched", MISMATCHED)
    out = str(tmp_path / "o")
    for argv in (["run", "--plugins", "mismatched", *TINY, "--out", out],
                 ["check", "--plugins", "mismatched", "--workload", workload, "--device", "cpu", "--out", out]):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert "plugin 'mismatched' failed to load: KernelSpecError: " in err, err
        assert "kernel for 'rms_norm': fn one_arg_norm cannot be called as rms_norm(x: Tensor[..., H]" in err, err
        assert "kernel for 'silu_and_mul': factory two_arg_factory cannot take the engine's own kernel" in err, err


HALF_ONLY = """
    from fk_adapters import Kernel, hookimpl

    def rms(x, weight, eps):
        return x

    @hookimpl
    def fk_kernels(engine, device):
        return [Kernel(slot="rms_norm", fn=rms, dtypes=("bfloat16", "float16"), devices=("cpu",))]
"""


def test_a_dtype_no_selected_kernel_supports_is_refused(no_engine, make_plugin, monkeypatch, capsys, tmp_path):
    from fk_adapters.cli import common

    make_plugin("halfonly", HALF_ONLY)
    refused(capsys, ["run", "--plugins", "halfonly", *TINY, "--out", str(tmp_path)],
            "scenario tiny-llama runs in float32, which no selected kernel supports (they offer bfloat16, float16)")

    class Passed(Exception):
        pass

    def passed(*a, **k):
        raise Passed

    monkeypatch.setattr(common, "verify_engines", passed)  # the step after the kernels' checks
    with pytest.raises(Passed):
        main(["run", "--plugins", "halfonly", *TINY, "--dtype", "float16", "--out", str(tmp_path)])


def test_results_that_are_not_json_are_named(capsys, tmp_path):
    text, binary, good = tmp_path / "notes.txt", tmp_path / "blob.bin", tmp_path / "ok.json"
    text.write_text("not json")
    binary.write_bytes(b"\xff\xfe\x00\x81")
    good.write_text("{}")
    for bad in (text, binary):
        refused(capsys, ["report", str(bad)], f"results file {bad} is not JSON")
        refused(capsys, ["compare", str(good), str(bad)], f"HEAD {bad} is not JSON")
        refused(capsys, ["compare", str(bad), str(good)], f"BASE {bad} is not JSON")
    refused(capsys, ["report", str(tmp_path)], f"cannot read results file {tmp_path}")


def test_workloads_that_name_nothing_timed_are_refused(no_engine, capsys, tmp_path):
    base = ["run", "--plugins", "passthrough", *TINY, "--out", str(tmp_path / "o")]
    refused(capsys, [*base, "--workloads", "batch99"],
            "--workloads batch99 names none of tiny-llama's workloads in vllm: throughput balanced, latency batch1")
    refused(capsys, [*base, "--workloads", "latency,batch99"], "--workloads: batch99 names no workload of the chosen")
    refused(capsys, [*base, "--workloads", "throughput:batch1"], "names none of tiny-llama's workloads")
    refused(capsys, [*base, "--workloads", "latency", "--correctness-only"], "--correctness-only times none")
    items = ["run", "--engine", "transformers", "--plugins", "passthrough", "--scenario", "fk46-convnextv2",
             "--device", "cpu", "--out", str(tmp_path / "o"), "--workloads", "latency"]
    refused(capsys, items, "fk46-convnextv2 in transformers times no throughput or latency workload")
