"""Who else uses the GPU while an engine process runs.

The runner starts each engine with ``start_new_session=True``, so the engine and every worker it spawns share the
engine's session id. A ``Watcher`` asks nvidia-smi for the GPUs' compute processes about once a second and sorts
them by session: the engine's own, or foreign (another process on the GPU: its timings are not comparable).

- A listed pid whose /proc entry cannot be read (it exited between nvidia-smi and the read) counts as foreign, with
  ``"pid_gone": True``; a pid once read keeps its session.
- Once the engine's own processes were seen, foreign processes on GPUs none of them used are left out (another
  GPU of the same host does not slow this one).
- nvidia-smi missing or failing on every sample, or never listing the engine's processes nor a readable other one
  (a container whose nvidia-smi sees no or the host's pids): ``{"watched": False, "why": ...}``, never a clean
  result.
"""
from __future__ import annotations

import collections
import os
import subprocess
import threading

QUERY = ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,noheader,nounits"]
INTERVAL_S = 1.0


class QueryError(RuntimeError):
    """nvidia-smi is missing, failed, or printed something else."""


def _smi(args: list[str]) -> str:
    """nvidia-smi's output for ``args``; QueryError where it is missing or fails."""
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=10)
    except FileNotFoundError:
        raise QueryError("nvidia-smi not found") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise QueryError(f"nvidia-smi failed: {exc}") from None
    if out.returncode != 0:
        raise QueryError(f"nvidia-smi exited with {out.returncode}: {(out.stderr or out.stdout).strip()[:200]}")
    return out.stdout


def gpu_processes() -> list[dict]:
    """The compute processes on the GPUs: [{"pid", "name", "used_mib" (None when not reported), "gpu"}]."""
    return [_parse_line(line) for line in _smi(QUERY).splitlines() if line.strip()]


def gpu_names(visible: str | None = None) -> list[str]:
    """The model names of the GPUs a process started from here sees (``visible``: CUDA_VISIBLE_DEVICES' value, by
    default this process's: indices or UUIDs), from nvidia-smi; [] when it cannot tell."""
    return gpu_field("name", visible)


def gpu_field(field: str, visible: str | None = None, every: bool = False) -> list[str]:
    """nvidia-smi's ``field`` (a --query-gpu name: name, pci.bus_id, ...) of each GPU ``visible`` names (as
    ``gpu_names``; ``every``: each GPU of the host), in that order; a GPU nvidia-smi does not list is left out; []
    when it cannot tell."""
    try:
        out = _smi(["nvidia-smi", f"--query-gpu=index,uuid,{field}", "--format=csv,noheader"])
    except QueryError:
        return []
    rows = [[p.strip() for p in line.split(",", 2)] for line in out.splitlines() if line.count(",") >= 2]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    if visible is None or every:
        return [value for _, _, value in rows]
    by_key = {key: value for index, uuid, value in rows for key in (index, uuid)}
    return [by_key[v.strip()] for v in visible.split(",") if v.strip() in by_key]


def gpu_models(names: list[str] | None) -> str:
    """" (2x NVIDIA H100 80GB HBM3)" for the GPU models a run saw (``gpu_names``); "" where it recorded none."""
    counts = collections.Counter(names or [])
    return f" ({', '.join(f'{n}x {name}' for name, n in counts.items())})" if counts else ""


def _parse_line(line: str) -> dict:
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < 4 or not parts[0].isdigit():
        raise QueryError(f"unexpected nvidia-smi line: {line.strip()[:200]}")
    mem = parts[-2]
    return {"pid": int(parts[0]), "name": ",".join(parts[1:-2]), "used_mib": int(mem) if mem.isdigit() else None,
            "gpu": parts[-1]}


def session_id(pid: int) -> int | None:
    """The session id of ``pid`` (field 6 of /proc/<pid>/stat), None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return stat_session(f.read())
    except (OSError, ValueError, IndexError):
        return None


def stat_session(stat: str) -> int:
    """Field 6 (session) of a /proc/<pid>/stat line; the command name (field 2) may hold spaces and parentheses."""
    return int(stat[stat.rindex(")") + 1:].split()[3])


class Watcher:
    """Samples the GPU's processes in a daemon thread from start() to stop(); ``with Watcher(pid) as w:`` works too."""

    def __init__(self, pid: int, interval_s: float | None = None):
        self.pid, self.interval_s = pid, INTERVAL_S if interval_s is None else interval_s
        self.session = session_id(pid)
        self.sessions: dict[int, int | None] = {}
        self.samples, self.failed, self.why = 0, 0, ""
        self.own_gpus: set[str] = set()
        self.seen: dict[int, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"gpu-share-{pid}", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def stop(self) -> dict:
        """What was seen: {"watched": True, "samples", "foreign": [...]} or {"watched": False, "why"}."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        return self.result()

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval_s):
                return

    def sample(self) -> None:
        """One look at the GPU's processes."""
        try:
            procs = gpu_processes()
        except QueryError as exc:
            self.failed += 1
            self.why = str(exc)
            return
        self.samples += 1
        for p in procs:
            if p["pid"] == os.getpid():  # the runner itself is part of this run
                continue
            if self.sessions.get(p["pid"]) is None:
                self.sessions[p["pid"]] = session_id(p["pid"])
            sid = self.sessions[p["pid"]]
            if self.session is not None and sid == self.session:
                self.own_gpus.add(p["gpu"])
                continue
            seen = self.seen.setdefault(p["pid"], {"pid": p["pid"], "name": p["name"], "max_used_mib": None,
                                                   "samples": 0, "gpus": set(), "readable": False})
            seen["samples"] += 1
            seen["gpus"].add(p["gpu"])
            seen["readable"] = seen["readable"] or sid is not None
            if p["used_mib"] is not None:
                seen["max_used_mib"] = max(seen["max_used_mib"] or 0, p["used_mib"])

    def result(self) -> dict:
        if self.session is None:
            return {"watched": False, "why": f"the engine process {self.pid} was gone before its session could be read"}
        if not self.samples:
            return {"watched": False, "why": self.why or "no sample was taken"}
        if not self.own_gpus and not any(s["readable"] for s in self.seen.values()):
            return {"watched": False, "why": "nvidia-smi listed only pids this machine cannot read (another PID "
                                             "namespace?): whose they are is unknown" if self.seen else
                    "nvidia-smi never listed a process of the engine (does it see this machine's processes?)"}
        foreign = []
        for s in self.seen.values():
            if self.own_gpus and not s["gpus"] & self.own_gpus:
                continue
            entry = {k: s[k] for k in ("pid", "name", "max_used_mib", "samples")}
            if not s["readable"]:
                entry["pid_gone"] = True
            foreign.append(entry)
        out = {"watched": True, "samples": self.samples, "foreign": foreign}
        if self.failed:
            out["failed_samples"] = self.failed
        return out


def disturbed(row: dict) -> list[str]:
    """Why a results row's timings are not comparable (``perf.disturbed``: another process used the GPU during a
    timed engine run), empty when clean."""
    return (row.get("perf") or {}).get("disturbed") or []


def foreign(res: dict) -> list[dict]:
    """The other processes the GPU watcher saw during this engine run (``gpu_share``)."""
    return (res.get("gpu_share") or {}).get("foreign") or []


def sharing(procs: list[dict]) -> str:
    """The sentence fk writes for an engine run that shared the GPU with ``procs``."""
    return f"another process used the GPU during this run ({describe(procs)})"


def describe(procs: list[dict]) -> str:
    """pid 1234 python3, up to 18482 MiB; ..."""
    def one(p):
        mem = f", up to {p['max_used_mib']} MiB" if p.get("max_used_mib") is not None else ""
        gone = " (gone before it could be read)" if p.get("pid_gone") else ""
        return f"pid {p['pid']} {p.get('name') or '?'}{gone}{mem}"
    return "; ".join(one(p) for p in procs)
