"""fk run, capture and check verify the engine against its RECORD first: a modified one is refused, or (allowed)
never called stock. The engine is a fake vllm distribution on FK_VLLM_PYTHONPATH; no engine process starts."""
import json
import os

import pytest
from fake_dist import write_dist

from fk_adapters import plots
from fk_adapters.cli import run_cmd
from fk_adapters.cli.main import main

CUSTOM_OPS = "vllm/_custom_ops.py"


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """vllm 0.0.1 as a wheel would install it, in a folder that only the engine's processes see."""
    site = write_dist(tmp_path / "engine-site", "vllm", "0.0.1", {
        "vllm/__init__.py": b"__version__ = '0.0.1'\n", CUSTOM_OPS: b"def rms_norm(x):\n    return x\n"})
    monkeypatch.setenv("FK_VLLM_PYTHONPATH", str(site))
    monkeypatch.setenv("FK_INTEGRITY_CACHE", str(tmp_path / "integrity"))
    return site


def _modify(site):
    path = site / CUSTOM_OPS
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01  # one byte, same size
    path.write_bytes(bytes(data))


def _engine(python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
    return {"status": "ok", "wall_s": 1.0, "tokens": [[1, 2, 3]] * 4, "teacher_logprobs": [[-1.0] * 10] * 2}


def _judge(cand, loads, mode, *more):
    return {"workers": [{"pid": 1, "plugins_loaded": True}], "load_errors": [],
            "slots": {"rms_norm": {"plugin": "passthrough", "kernel": "engine:rms_norm", "entered": ["RMSNorm"],
                                   "layers": 1, "calls": 1, "profiled": False, "status": "exercised",
                                   "proof": "1 calls in the worker(s)"}}}


def _run(tmp_path, *extra):
    return main(["run", "--engine", "vllm", "--plugins", "passthrough", "--scenario", "tiny-llama", "--device", "cpu",
                 "--dtype", "bfloat16", "--out", str(tmp_path / "out"), *extra])


def test_fk_run_refuses_a_modified_engine_before_any_engine_starts(fake_vllm, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run_cmd, "run_suite", lambda *a, **k: pytest.fail("an engine run started"))
    _modify(fake_vllm)
    assert _run(tmp_path) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("fk run: error: vllm is MODIFIED (1 file(s) differ from its RECORD): "
                          f"modified {CUSTOM_OPS}"), err
    assert "--allow-modified-engine" in err


def test_an_unmodified_engine_is_the_stock_baseline(fake_vllm, fake_runner, tmp_path, capsys):
    fake_runner(_engine, _judge)
    assert _run(tmp_path) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    vllm = results["engine_integrity"]["vllm"]
    assert results["verdict"] == "PASS" and vllm["unmodified"] and vllm["location"] == str(fake_vllm)
    assert vllm["dist"] == "vllm" and vllm["version"] == "0.0.1" and vllm["files_checked"] == 4
    assert results["engine_integrity"]["transformers"]["role"]  # bf16: it may make the float32 reference
    assert "- baseline: stock vllm (no fk plugin)" in (tmp_path / "out" / "report.md").read_text()
    assert "vs. stock vllm 0.0.1 on cpu" in capsys.readouterr().out


def test_a_run_allowed_on_a_modified_engine_never_calls_it_stock_and_fails(fake_vllm, fake_runner, tmp_path, capsys):
    fake_runner(_engine, _judge)
    _modify(fake_vllm)
    assert _run(tmp_path, "--allow-modified-engine") == 1
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["verdict"] == "FAIL" and results["scenarios"][0]["status"] == "PASSED"  # only the engine fails it
    assert results["engine_integrity"]["vllm"]["modified"] == [CUSTOM_OPS]
    assert (f"vllm is MODIFIED (1 file(s) differ from its RECORD): modified {CUSTOM_OPS}: it is not the stock engine"
            in results["problems"])
    report = (tmp_path / "out" / "report.md").read_text()
    assert "- baseline: MODIFIED vllm (1 file(s) differ from its RECORD) (no fk plugin)" in report
    out = capsys.readouterr().out
    for text in (report, out, plots._run_title(results)):
        assert "stock vllm" not in text and "MODIFIED vllm" in text


def test_capture_and_check_refuse_a_modified_engine(fake_vllm, tmp_path, capsys):
    _modify(fake_vllm)
    workload = tmp_path / "wl.json"
    workload.write_text(json.dumps({"scenario": "tiny-llama", "slots": {}}))
    for argv in (["capture", "--engine", "vllm", "--scenario", "tiny-llama", "--device", "cpu",
                  "--out", str(tmp_path / "wl")],
                 ["check", "--engine", "vllm", "--plugins", "passthrough", "--workload", str(workload),
                  "--device", "cpu", "--out", str(tmp_path / "check")]):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "vllm is MODIFIED" in err and CUSTOM_OPS in err, err
    assert not os.path.exists(tmp_path / "wl") and not os.path.exists(tmp_path / "check")
