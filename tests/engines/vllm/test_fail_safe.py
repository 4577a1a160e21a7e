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
from procs import as_from_a_terminal, processes_of, wait_for

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
              pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")]

def engine_processes(out) -> list[int]:
    """Live processes of every engine run under ``out`` (run_job gives each FK_RUN_DIR=<its run dir>)."""
    logs = out / "logs"
    dirs = [str(d) for sc in logs.iterdir() for d in sc.iterdir()] if logs.is_dir() else []
    return [p for d in dirs for p in processes_of(d)]


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGINT, marks=pytest.mark.slow),
                                 pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGKILL],
                         ids=lambda s: s.name)
def test_no_engine_process_survives_fk_while_a_kernel_hangs(tmp_path, sig):
    """fk-wrong's `hang`: its silu_and_mul never returns."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "run", "--plugins", "hang", "--scenario", "tiny-llama",
           "--quick", "--out", str(out), "--model-cache", str(tmp_path / "models"), "--timeout", "900"]
    fk = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          preexec_fn=as_from_a_terminal)
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


def test_a_candidate_killed_in_its_throughput_phase_keeps_its_correctness_and_load_records(tmp_path):
    """fk-wrong's `oom-late`: a correct kernel whose engine dies (SIGKILL of its process group, as the OOM killer
    would) once the run's correctness results are kept."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "run", "--plugins", "oom-late", "--scenario", "tiny-llama",
           "--quick", "--out", str(out), "--model-cache", str(tmp_path / "models")]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=1200)
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
