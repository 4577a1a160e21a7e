"""Real vLLM on CPU: stopping fk while a plugin kernel hangs the engine leaves no engine process behind. Marked
`engine` (minutes)."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from procs import processes_of, wait_for

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
              pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")]

HANGING = """
import time
from fk_adapters import Kernel, hookimpl

def stuck(x):
    while True:
        time.sleep(1)

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="silu_and_mul", fn=stuck, devices=("cpu", "cuda"))]
"""


def engine_processes(out) -> list[int]:
    """Live processes of every engine run under ``out`` (run_job gives each FK_RUN_DIR=<its run dir>)."""
    logs = out / "logs"
    dirs = [str(d) for sc in logs.iterdir() for d in sc.iterdir()] if logs.is_dir() else []
    return [p for d in dirs for p in processes_of(d)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_no_engine_process_survives_fk_while_a_kernel_hangs(tmp_path, make_plugin, sig):
    make_plugin("stuck", HANGING)
    site = str(next(p for p in sys.path if p.endswith("site")))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "run", "--plugins", "stuck", "--scenario", "tiny-llama",
           "--quick", "--out", str(out), "--model-cache", str(tmp_path / "models"), "--timeout", "900"]
    env = dict(os.environ, PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    fk = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    candidate = out / "logs" / "tiny-llama" / "candidate"
    try:
        # the plugin installed in the candidate's driver and EngineCore processes, whose first forward then hangs
        wait_for(lambda: (candidate / "loads").is_dir() and len(os.listdir(candidate / "loads")) >= 2, 600,
                 "the candidate's engine processes loading the plugin")
        time.sleep(5)
        assert len(processes_of(str(candidate))) >= 2
        fk.send_signal(sig)
        code = fk.wait(30)
        t0 = time.monotonic()
        wait_for(lambda: not engine_processes(out), 10, f"every engine process gone after {sig.name}")
        print(f"engine processes gone {time.monotonic() - t0:.1f} s after fk exited")
    finally:
        fk.kill()
        for pid in engine_processes(out):
            os.kill(pid, signal.SIGKILL)
    err = fk.stderr.read()
    assert code == -sig if sig == signal.SIGKILL else code == 128 + sig, err
    if sig != signal.SIGKILL:
        assert "Traceback" not in err and err.strip().splitlines()[-1] in (
            "fk run: interrupted", f"fk run: stopped by {sig.name}"), err


DIES_IN_THROUGHPUT = """
import json, os, signal
import torch.nn.functional as F
from fk_adapters import Kernel, hookimpl

def _correctness_kept():
    try:
        with open(os.path.join(os.environ["FK_RUN_DIR"], "partial.json")) as f:
            return "teacher_logprobs" in json.load(f)
    except (KeyError, OSError, ValueError):
        return False

def silu_and_mul(x):
    if _correctness_kept():  # the throughput phase: the whole engine dies, as the OOM killer would take it
        os.killpg(os.getpgid(0), signal.SIGKILL)
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="silu_and_mul", fn=silu_and_mul, devices=("cpu", "cuda"))]
"""


def test_a_candidate_killed_in_its_throughput_phase_keeps_its_correctness_and_load_records(tmp_path, make_plugin):
    make_plugin("dies", DIES_IN_THROUGHPUT)
    site = str(next(p for p in sys.path if p.endswith("site")))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "run", "--plugins", "dies", "--scenario", "tiny-llama",
           "--quick", "--out", str(out), "--model-cache", str(tmp_path / "models")]
    env = dict(os.environ, PYTHONPATH=site + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    row = json.loads((out / "results.json").read_text())["scenarios"][0]
    assert row["status"] == "RUNTIME_ERROR"
    assert row["candidate"]["status"] == "crashed" and "tokens" in row["candidate"]["kept_from_partial"]
    assert row["correctness"]["measured_before_failure"] and row["correctness"]["passed"]
    assert "perf" not in row
    loads = os.listdir(out / "logs" / "tiny-llama" / "candidate" / "loads")
    installed = [w for w in row["evidence"]["processes"] if w.get("installed") == ["silu_and_mul"]]
    assert len(loads) >= 2 and len(installed) == len(loads)
    report = (out / "report.md").read_text()
    assert "No plugin kernel was installed" not in report and "pid(s) ?" not in report
    assert "measured before the failure" in report
