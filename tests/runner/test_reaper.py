"""No engine process outlives fk: SIGINT, SIGTERM, SIGHUP and SIGKILL of the process running ``run_job``, with a
stand-in engine that hangs and has helpers in its group and one that left it (setsid)."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from procs import as_from_a_terminal, processes_of, wait_for

from fk_adapters.runner import reaper

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")

HANGING_ENGINE = """
    import subprocess, sys, time
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    subprocess.Popen(sleep)  # a helper in the engine's group
    subprocess.Popen(sleep, start_new_session=True)  # one that left it
    print("[fk] hanging", flush=True)
    time.sleep(600)
"""

FK = """
    import sys
    from fk_adapters.cli.main import STOP_SIGNALS, _stopping_on
    from fk_adapters.runner.proc import run_job

    with _stopping_on(STOP_SIGNALS):
        run_job(sys.executable, "hanging_engine", {}, sys.argv[1], {"PYTHONPATH": sys.argv[2]}, 600)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=lambda s: s.name)
def test_no_engine_process_survives_fk(tmp_path, sig):
    (tmp_path / "hanging_engine.py").write_text(textwrap.dedent(HANGING_ENGINE))
    (tmp_path / "fk_like.py").write_text(textwrap.dedent(FK))
    run_dir = str(tmp_path / "run")
    fk = subprocess.Popen([sys.executable, str(tmp_path / "fk_like.py"), run_dir, str(tmp_path)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=as_from_a_terminal)
    try:
        wait_for(lambda: len(processes_of(run_dir)) >= 3, 60, "the engine and its two helpers")
        time.sleep(0.5)  # the reaper has seen them
        fk.send_signal(sig)
        fk.wait(20)
        wait_for(lambda: not processes_of(run_dir), 10, f"every engine process gone after {sig.name}")
    finally:
        fk.kill()
        for pid in processes_of(run_dir):
            os.kill(pid, signal.SIGKILL)


def test_the_reaper_ends_with_the_engine(tmp_path):
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"], start_new_session=True)
    r = reaper.start(engine.pid)
    engine.wait()
    assert r.wait(10) == 0


def test_a_signal_fk_was_started_with_ignored_stays_ignored(tmp_path):
    """``nohup fk run ...``: the terminal's SIGHUP must not stop fk, nor its engine."""
    (tmp_path / "hanging_engine.py").write_text(textwrap.dedent(HANGING_ENGINE))
    (tmp_path / "fk_like.py").write_text(textwrap.dedent(FK))
    run_dir = str(tmp_path / "run")
    fk = subprocess.Popen([sys.executable, str(tmp_path / "fk_like.py"), run_dir, str(tmp_path)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        wait_for(lambda: len(processes_of(run_dir)) >= 3, 60, "the engine and its two helpers")
        fk.send_signal(signal.SIGHUP)
        time.sleep(2)
        assert fk.poll() is None and len(processes_of(run_dir)) >= 3
    finally:
        fk.kill()
        fk.wait()
        wait_for(lambda: not processes_of(run_dir), 10, "the engine gone with fk (the reaper)")
