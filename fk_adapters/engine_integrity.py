"""Is the engine fk is about to run the one its wheel installed? ``fk doctor``'s RECORD check, cached per install.

``check`` runs in the engine's Python; ``verify`` starts it there, as ``fk doctor`` does. The cache keeps, per
install (distribution, version, location), each file that verified ok with its (size, mtime_ns, ctime_ns, RECORD
digest): a file whose stat changed since is hashed again. The rest (``describe``, ``refusal``, ``problems``) is how
fk run, capture and check name an engine: "stock" only when every file matched.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

from fk_adapters import user_cache
from fk_adapters.doctor import DoctorError, find_engine_dist, module_origin, verify_record

CACHE_ENV = "FK_INTEGRITY_CACHE"  # folder of the cache files (default: <XDG cache>/fk-adapters/integrity)
LISTED = 20  # paths kept per kind (modified, missing, added) in results
REFERENCE_ROLE = "float32 reference where the engine cannot make it"


def cache_dir() -> str:
    if os.environ.get(CACHE_ENV):
        return os.environ[CACHE_ENV]
    return os.path.join(user_cache.home(), "integrity")


def _cache_file(key: dict) -> str:
    where = hashlib.sha256(key["location"].encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"{key['dist']}-{key['version']}-{where}.json")


def _load(path: str, key: dict) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data.get("files", {}) if data.get("key") == key else {}


def _save(path: str, key: dict, files: dict) -> str:
    """Write the cache file; '' or why it could not be written (the check stands without it)."""
    try:
        user_cache.write_json(path, {"key": key, "files": files})
    except OSError as exc:
        return f"cache not written: {exc}"
    return ""


def _check_dist(dist, module: str) -> dict:
    name = dist.metadata["Name"] or "?"
    key = {"dist": name, "version": dist.version, "location": str(Path(str(dist.locate_file(""))).resolve())}
    path = _cache_file(key)
    files = _load(path, key)
    rec = verify_record(name, cache=files)
    origin = module_origin(module)
    elsewhere = origin if origin and not Path(origin).resolve().is_relative_to(Path(rec["location"])) else None
    out = {k: rec[k] for k in ("dist", "version", "location", "files_checked", "files_from_cache")}
    out.update({k: rec[k][:LISTED] for k in ("modified", "missing", "unrecorded_py")})
    out["differ"] = sum(len(rec[k]) for k in ("modified", "missing", "unrecorded_py"))
    out["imports_from"] = elsewhere  # the engine would not run the verified files
    out["unmodified"] = bool(rec["unmodified"] and not elsewhere)
    out["cache"] = _save(path, key, files) or path
    return out


def check(modules: list[str]) -> dict:
    """In the engine's Python: the distribution of each top-level module (the first is the engine's; later ones,
    e.g. the engine's own kernels, are skipped when not installed) checked against its RECORD."""
    t0, at = time.perf_counter(), dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    dists: list[dict] = []
    for i, module in enumerate(modules):
        dist = find_engine_dist(module)
        if dist is None and i == 0:
            raise DoctorError(f"no installed distribution provides the module {module!r}")
        if dist is None or any(d["dist"] == dist.metadata["Name"] for d in dists):
            continue
        dists.append(_check_dist(dist, module))
    main, *also = dists
    out = {**main, "verified_at": at}
    if also:
        out["also"] = also
    out["unmodified"] = all(d["unmodified"] for d in dists)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


_RUN = ("import json, sys\nfrom fk_adapters.doctor import DoctorError\nfrom fk_adapters.engine_integrity import check\n"
        "try: print(json.dumps(check(sys.argv[1:])))\nexcept DoctorError as e: print(json.dumps({'error': str(e)}))")


def verify(spec) -> dict:
    """``check`` of the engine's module and of the one its own kernels come from (``natives_setup``), run in the
    engine's Python and environment; {"error": why} when it cannot be verified."""
    modules = list(dict.fromkeys(m.split(".", 1)[0] for m in (spec.module, spec.natives_setup) if m))
    p = subprocess.run([spec.python, "-c", _RUN, *modules], capture_output=True, text=True, env=spec.process_env())
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
        return {"error": f"the check could not run in {spec.python}: {last}"}
    return json.loads(lines[-1])


# ----------------------------------------------------------- what fk says about an engine

def _dists(entry: dict) -> list[dict]:
    return [entry] + entry.get("also", [])


def differences(entry: dict) -> list[str]:
    """What differs from the RECORDs, first ones first: 'modified vllm/x.py', 'imports from /y', ..."""
    out = []
    for d in _dists(entry):
        if d.get("imports_from"):
            out.append(f"{d['dist']} imports from {d['imports_from']}, not its installed files")
        out += ([f"modified {p}" for p in d["modified"]] + [f"missing {p}" for p in d["missing"]]
                + [f"added {p}" for p in d["unrecorded_py"]])
    return out


def _what(entry: dict) -> str:
    n = sum(d["differ"] for d in _dists(entry))
    moved = [d["dist"] for d in _dists(entry) if d.get("imports_from")]
    return "; ".join(filter(None, (f"{n} file(s) differ from its RECORD" if n else "",
                                   f"{', '.join(moved)} imported from elsewhere" if moved else "")))


def describe(engine: str, entry: dict | None, version: str = "") -> str:
    """How reports name the engine: 'stock vllm 0.32.0' only when its files verified against its RECORD."""
    name = f"{engine} {version}".strip()
    if not entry:
        return f"{name} (its files were not verified against its RECORD)"
    if "error" in entry:
        return f"{name} (not verified: {entry['error']})"
    return f"stock {name}" if entry["unmodified"] else f"MODIFIED {name} ({_what(entry)})"


def summary(name: str, entry: dict) -> str:
    """One line for the console: what was checked, against what, how fast."""
    who = f"{name} ({entry['role']})" if entry.get("role") else name
    if "error" in entry:
        return f"{who}: not verified: {entry['error']}"
    checked = sum(d["files_checked"] for d in _dists(entry))
    cached = sum(d["files_from_cache"] for d in _dists(entry))
    dists = ", ".join(f"{d['dist']} {d['version']}" for d in _dists(entry))
    state = "unmodified" if entry["unmodified"] else f"MODIFIED ({_what(entry)})"
    return (f"{who}: {dists}: {checked} files checked against RECORD, {state} "
            f"({cached} unchanged since an earlier check; {entry['seconds']:.2f} s)")


def _bad(entries: dict) -> dict:
    """Entries that must not be called stock: modified, or (the run's own engines) not verifiable. A reference
    engine that cannot be checked (e.g. not installed) is only stated: it makes nothing then."""
    return {name: e for name, e in entries.items()
            if ("error" not in e and not e["unmodified"]) or ("error" in e and not e.get("role"))}


def _line(name: str, entry: dict) -> str:
    who = f"{name} ({entry['role']})" if entry.get("role") else name
    if "error" in entry:
        return f"{who} could not be verified against its RECORD: {entry['error']}"
    diff = differences(entry)
    return (f"{who} is MODIFIED ({_what(entry)}): {', '.join(diff[:3])}"
            + (", ..." if len(diff) > 3 else ""))


def refusal(entries: dict) -> str:
    """One line refusing to run engines that are not stock, or ''."""
    bad = _bad(entries)
    if not bad:
        return ""
    return ("; ".join(_line(n, e) for n, e in bad.items())
            + ": fk runs engines as installed (reinstall it), or give --allow-modified-engine to go on "
              "without calling it stock")


def problems(entries: dict) -> list[str]:
    """The suite problems of engines that ran modified (with --allow-modified-engine)."""
    return [_line(n, e) + ": it is not the stock engine" for n, e in _bad(entries).items()]
