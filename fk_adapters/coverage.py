"""Slot coverage: which catalog slots each architecture's run exercised, and where the rest of
its device time goes (from ``fk capture`` workload files, measured by running, never declared)."""
from __future__ import annotations

import datetime as dt
import functools

from tabulate import tabulate

from fk_adapters import __version__, engines, gpu_share, op_families, results_files
from fk_adapters.tasks import SLOTS


def collect(roots: list[str]) -> list[dict]:
    """The newest capture per (scenario, engine) under ``roots``."""
    newest: dict[tuple[str, str], dict] = {}
    for path, wl in results_files.json_objects(roots):
        if not results_files.is_capture(wl):
            continue
        key = (wl["scenario"], wl.get("engine", "?"))
        if key not in newest or wl.get("created", "") > newest[key].get("created", ""):
            newest[key] = dict(wl, path=path)
    return [newest[k] for k in sorted(newest)]


EAGER_ONLY = "eager (its only mode)"


def collect_served(roots: list[str]) -> list[dict]:
    """Per (scenario, engine, mode), the newest profiled `fk run` under ``roots`` as served: the stock side's device
    time per op family in its profiled step, and the slots any plugin's side proved it ran in that scenario there.
    Eager runs are left out where the engine compiles (it serves so; fk-wrong's variants that are not graph-safe run
    eager, and the captures' table already gives the eager picture); an engine that never compiles serves eager."""
    newest: dict[tuple[str, str, str], dict] = {}
    proven: dict[tuple[str, str, str], set] = {}
    for path, res in results_files.json_objects(roots):
        mode = served_mode(res)
        if res.get("kind") != "run" or res.get("aa") or mode is None:
            continue
        for row in res.get("scenarios") or []:
            split = row.get("time_split") or {}
            families = {f["family"]: f["baseline_us"] for f in split.get("families") or []}
            if not split.get("baseline_us") or not families:
                continue
            slots = ((row.get("evidence") or {}).get("slots")) or {}
            entry = {"scenario": row["scenario"], "engine": res.get("engine", "?"), "mode": mode,
                     "device": res.get("device", "?") + gpu_share.gpu_models(res.get("gpus")),
                     "created": res.get("created", ""), "path": path, "step_us": split["baseline_us"],
                     "family_us": families, "exercised": sorted(n for n, e in slots.items()
                                                                if e.get("status") == "exercised")}
            key = (entry["scenario"], entry["engine"], entry["mode"])
            proven.setdefault(key, set()).update(entry["exercised"])
            if key not in newest or entry["created"] > newest[key]["created"]:
                newest[key] = entry
    return [dict(newest[k], exercised=sorted(proven[k])) for k in sorted(newest)]


def served_mode(res: dict) -> str | None:
    """The mode a run's engine really served in, None for an eager run of an engine that compiles. fk's "compiled"
    on an engine that never compiles (HF transformers) is eager: results.json keeps the mode fk was asked for."""
    spec = engines.ENGINES.get(res.get("engine", ""))
    if spec is not None and spec.always_eager:
        return EAGER_ONLY
    return None if res.get("mode") == "eager" else res.get("mode", "?")


def _proven_family(run: dict, fam: str) -> bool:
    """Did a plugin's side exercise one of this op family's slots (``collect_served``'s ``exercised``)?"""
    return bool(set(op_families.SLOT_FAMILIES.get(fam, ())) & set(run["exercised"]))


def served_share(run: dict) -> float:
    """The share of the stock step's device time in catalog families whose slots the plugin's side exercised."""
    return sum(us for fam, us in run["family_us"].items() if _proven_family(run, fam)) / run["step_us"]


NOT_ROUTED = " (catalog family, its slot not called here)"


def _routed(capture: dict, fam: str) -> bool:
    """A catalog family counts as covered in a run only if the run called one of its slots."""
    calls = capture.get("total_calls", {})
    return any(calls.get(s, 0) for s in op_families.SLOT_FAMILIES.get(fam, ()))


def statistics_paused(capture: dict) -> bool:
    """Whether the capture's profile is free of fk capture's value statistics: none were recorded (a capture without
    ``values_note``, older than them), or the profile says they were paused (since session 30), or a token model's
    (its profiled steps paused them before; another family's driver profiled its own forward with the statistics'
    reductions in it: a third to half of the device time, seen on an H100)."""
    if "values_note" not in capture or capture.get("profile", {}).get("values_paused"):
        return True
    return _token_model(capture["scenario"])


@functools.cache
def _token_model(scenario: str) -> bool:
    """A built-in scenario of the token family (read once per name: every rendering asks for each capture's shares
    several times); an unknown one's family is unknown: False."""
    from fk_adapters import scenarios

    try:
        return scenarios.load(scenario).family == "llm"
    except scenarios.ScenarioError:
        return False


def op_shares(capture: dict) -> dict[str, float]:
    """A run's device-time share per op family, sorted from its kernel times by today's families when it
    kept them (so older captures follow fixes to the families), else as the capture stored them; none where fk's
    own statistics ran inside the profile."""
    profile = capture.get("profile", {})
    if not statistics_paused(capture):
        return {}
    return op_families.shares(profile["kernel_us"]) if profile.get("kernel_us") else profile.get("op_shares", {})


def in_slot_share(capture: dict) -> float | None:
    """The share of the profiled batch's device time in kernels launched inside fk's slot calls (the slots' own
    engine code, whatever its kernels are named); None for a capture older than that measure (``SLOT_US_FROM``), or
    unpaused."""
    profile = capture.get("profile", {})
    if not statistics_paused(capture) or profile.get("slot_us_from") != op_families.SLOT_US_FROM \
            or "slot_us" not in profile or not profile.get("kernel_us"):
        return None
    return sum(profile["slot_us"].values()) / sum(profile["kernel_us"].values())


def uncovered_shares(capture: dict) -> dict[str, float]:
    """A run's device-time shares outside the slots it called; a catalog family whose slots the
    run never called (e.g. an activation fused inside a MoE kernel's path) is named as such."""
    out = {}
    for fam, share in op_shares(capture).items():
        if fam not in op_families.SLOT_FAMILIES:
            out[fam] = share
        elif not _routed(capture, fam):
            out[fam + NOT_ROUTED] = share
    return out


def uncovered_ranking(captures: list[dict]) -> list[tuple[str, float, int]]:
    """Op families outside what the catalog covered, by mean device-time share over the profiled
    runs: (family, mean share, runs where it appears), largest first."""
    profiled = [uncovered_shares(c) for c in captures if op_shares(c)]
    if not profiled:
        return []
    fams = {f for shares in profiled for f in shares}
    ranked = [(f, sum(s.get(f, 0.0) for s in profiled) / len(profiled), sum(1 for s in profiled if s.get(f)))
              for f in fams]
    return sorted(ranked, key=lambda r: -r[1])


def render_served(runs: list[dict]) -> list[str]:
    """Markdown lines: the device time in catalog slots as each engine serves (``collect_served``)."""
    if not runs:
        return []
    rows = []
    for r in runs:
        outside = sorted(((us, f) for f, us in r["family_us"].items() if not _proven_family(r, f)), reverse=True)
        rows.append([r["scenario"], r["engine"], r["device"], r["mode"], f"{r['step_us']:.0f}",
                     f"{100 * served_share(r):.1f}%",
                     ", ".join(f"{f} {100 * us / r['step_us']:.1f}%" for us, f in outside[:3] if us) or "-"])
    return ["", "## As served", "",
            "The stock side's profiled step of the newest `fk run` in each serving mode it ran (compiled + CUDA graphs "
            "fuse what eager leaves apart; eager runs are left out, except an engine's that never compiles, such as HF "
            "transformers here): the share of its device time in catalog "
            "families whose slots a plugin's side of some `fk run` of the scenario, engine and mode exercised.", "",
            tabulate(rows, headers=["scenario", "engine", "device", "mode", "step device µs",
                                    "device time in catalog slots", "largest outside"], tablefmt="github")]


def render(captures: list[dict], command: str = "", served: list[dict] | None = None) -> tuple[str, dict]:
    """(markdown, JSON) of the coverage matrix, the ranking and the as-served shares."""
    slots = list(SLOTS)
    lines = ["# Slot coverage, measured", "",
             f"- fk {__version__}, created {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}",
             "- calls per catalog slot while each engine served the scenario (`fk capture`, eager); "
             "0: the slot is hooked but the model never called it"]
    if command:
        lines.append(f"- command: `{command}`")
    rows = []
    for c in captures:
        total = c.get("total_calls", {})
        shares = op_shares(c)
        in_catalog = sum(v for f, v in shares.items() if f in op_families.SLOT_FAMILIES and _routed(c, f))
        inside = in_slot_share(c)
        rows.append([c["scenario"], c.get("engine", "?"), c.get("device", "?")] + [total.get(s, "-") for s in slots]
                    + [f"{100 * in_catalog:.1f}%" if shares else "-",
                       "-" if inside is None else f"{100 * inside:.1f}%"])
    lines += ["", tabulate(rows, headers=["scenario", "engine", "device", *slots, "device time in catalog slots",
                                          "inside slot calls"], tablefmt="github"), "",
              "Device time in catalog slots: the kernels whose names fall in a catalog family whose slots the run "
              "called (`fk_adapters/op_families.py`). Inside slot calls: the kernels launched inside fk's slot calls, "
              "whatever their names (a slot whose engine code runs generic elementwise kernels counts there too); - "
              "for captures made before fk measured it from the kernels inside each call's device span."]
    lines += render_served(served or [])
    ranking = uncovered_ranking(captures)
    if ranking:
        lines += ["", "## Where the catalog should grow", "",
                  "Op families outside the catalog, by mean share of device time over the profiled runs "
                  "(kernel names sorted into families by `fk_adapters/op_families.py`):", "",
                  tabulate([[f, f"{100 * m:.1f}%", n] for f, m, n in ranking],
                           headers=["op family", "mean share", "runs where it appears"], tablefmt="github")]
    data = {"kind": "coverage", "fk_version": __version__, "command": command,
            "captures": [{"scenario": c["scenario"], "engine": c.get("engine"), "device": c.get("device"),
                          "path": c["path"], "total_calls": c.get("total_calls", {}),
                          "op_shares": op_shares(c), "in_slot_share": in_slot_share(c)} for c in captures],
            "uncovered_ranking": [{"family": f, "mean_share": m, "runs": n} for f, m, n in ranking],
            "served": [dict(r, share=served_share(r)) for r in served or []]}
    return "\n".join(lines) + "\n", data
