"""Test helpers: the processes of an engine run, and waiting for a condition."""
import os
import signal
import time


def processes_of(run_dir: str) -> list[int]:
    """Live processes started for the engine run in ``run_dir`` (run_job gives each FK_RUN_DIR)."""
    mark = f"FK_RUN_DIR={run_dir}".encode()
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark in env and state != "Z":
            found.append(int(name))
    return found


def wait_for(cond, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def as_from_a_terminal():
    """``preexec_fn`` for a process under test: SIGINT, SIGTERM and SIGHUP as a terminal's shell leaves them (a
    background job of a script, or anything under nohup, such as CI, inherits some ignored, and fk keeps a signal it
    was started with ignored)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
