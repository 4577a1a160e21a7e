"""No engine process outlives the fk process that started it.

An engine run is its own process group (``start_new_session``: a terminal's Ctrl-C reaches fk, not the engine). fk
kills that group when the run ends, times out or is interrupted (``kill_tree``); for the one exit fk cannot clean up
after, SIGKILL, a reaper process per engine run watches fk and kills the engine's processes as soon as fk is gone:

    python -m fk_adapters.runner.reaper FK_PID ENGINE_PID

The reaper follows every descendant of the engine process while they live (an engine helper may leave the group
with setsid; once re-parented it can no longer be traced back), and ends once none is left.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.2


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[19])  # fields 4 and 22 of proc(5), counted after the command name


def descendants(root: int) -> dict[int, int]:
    """{pid: start time} of ``root`` and every process below it, as /proc shows them now."""
    parents, starts = {}, {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if name.isdigit():
            st = _stat(int(name))
            if st:
                parents[int(name)], starts[int(name)] = st
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in starts and pid not in found:
            found[pid] = starts[pid]
            todo += [p for p, pp in parents.items() if pp == pid]
    return found


def kill_tree(pgid: int, known: dict[int, int] | None = None) -> None:
    """SIGKILL the process group ``pgid`` and every process of ``known`` ({pid: start time}) that still is the
    process it was (a pid may have been reused since)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid, start in (known or {}).items():
        st = _stat(pid)
        if st and st[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def watch(fk_pid: int, engine_pid: int, poll_s: float = POLL_S) -> str:
    """Until fk dies (then kill the engine's processes) or they are all gone; says which."""
    known: dict[int, int] = {}
    while True:
        known.update(descendants(engine_pid))
        known = {p: s for p, s in known.items() if (_stat(p) or (0, None))[1] == s}
        if os.getppid() != fk_pid:
            kill_tree(engine_pid, known)
            return "fk is gone: engine killed"
        if not known and not _group_alive(engine_pid):
            return "engine ended"
        time.sleep(poll_s)


def start(engine_pid: int) -> subprocess.Popen:
    """A reaper for the engine process ``engine_pid`` (a group leader), watching this process."""
    return subprocess.Popen([sys.executable, "-m", __name__, str(os.getpid()), str(engine_pid)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # neither a terminal's signals nor fk's group reach it


def stop(reaper: subprocess.Popen) -> None:
    reaper.kill()
    reaper.wait()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch(int(sys.argv[1]), int(sys.argv[2]))
