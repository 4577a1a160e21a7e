"""Did each selected kernel really run? Judged from what the engine processes reported.

Per slot: 'exercised' (proof found), 'not exercised' (the model built a layer for the slot but
no proof the kernel ran: a failure unless allowed), 'not proven' (the kernel declares profiler names that cannot
prove it ran: the plugin does not define them, the stock engine launches them, or another slot declares them too;
see ``kernel_names``: always a failure), or 'n/a' (no layer the model built can route
to this slot: none built, or all left stock). A kernel that declares names is proven by their launches in the
profiled step wherever one was taken on a device (eager mode too: a kernel that only calls the engine's own op is
called, yet launches none of its names). Otherwise proof is the call count in eager mode; under CUDA
graphs it is, for a kernel that declares no
names, the calls made while graphs were captured (``graphs``: the engine runs the hooked Python
at capture) or, under torch.compile (``compiled``), its opaque op run at capture: the op's body
runs only if the compiled graph calls it. A process that loaded its graph from the compile cache
(a later round, or a later run of the same plugin code) traces nothing, so a trace is not
required.
"""
from __future__ import annotations

from fk_adapters import kernel_names, probe
from fk_adapters.ops import op_key
from fk_adapters.results import SlotEvidence as E


def _sum(probes: list[dict], field: str, key: str) -> int:
    return sum(p.get(field, {}).get(key, 0) for p in probes or [])


def installed_kernels(loads: list[dict]) -> dict[str, dict]:
    """{slot: {plugin, kernel, entered}} as installed by the processes that loaded plugins."""
    out: dict[str, dict] = {}
    for rec in loads:
        for slot, info in rec.get("installed", {}).items():
            out.setdefault(slot, info)
    return out


def kernel_meta(loads: list[dict]) -> dict[tuple[str, str], dict]:
    return {(p["name"], k["slot"]): k for rec in loads for p in rec.get("plugins", []) for k in p.get("kernels", [])}


MODES = ("eager", "graphs", "compiled")


def plugin_code(loads: list[dict]) -> dict[str, dict]:
    """{plugin: {dist, version, source_sha256}} as every loading process saw it ("mixed" if they differ)."""
    out: dict[str, dict] = {}
    for rec in loads:
        for p in rec.get("plugins", []):
            seen = {k: p.get(k, "") for k in ("dist", "version", "source_sha256")}
            prev = out.setdefault(p["name"], seen)
            if prev != seen:
                prev["source_sha256"] = "mixed"
    return out


def _ran(ok: bool) -> E:
    return E.EXERCISED if ok else E.NOT_EXERCISED


def rank_evidence(probes: list[dict], profile: list[dict] | None, slot: str, key: str, names) -> dict[int, dict]:
    """{rank: its layers, calls (and profiler hits) for ``slot``} over the tensor-parallel ranks the workers
    reported ({} without tensor parallelism); a rank no worker reported is listed with ``reported`` False. Where
    the workers did not say their rank but the profiles of 2+ ranks did, the ranks are those of the profiles (their
    layers and calls unknown, None): each must still show the kernel's launches in its own trace."""
    ranked = [p for p in probes or [] if "rank" in p]
    traced = [p for p in profile or [] if "rank" in p]
    top = max((p["rank"] for p in traced), default=0)
    if ranked:
        size = max(p["world_size"] for p in ranked)
        out: dict[int, dict] = {r: {"reported": False} for r in range(size)}
        for p in ranked:
            out[p["rank"]] = {"reported": True, "layers": p.get("constructed", {}).get(slot, 0),
                              "calls": p.get("calls", {}).get(key, 0) + p.get("native_path", {}).get(key, 0)}
    elif top > 0:  # SGLang names a single GPU's trace "TP-0" too
        out = {r: {"reported": False} for r in range(1 + top)}
        for p in traced:
            out[p["rank"]] = {"reported": True, "layers": None, "calls": None}
    else:
        return {}
    for prof in traced:
        if out.get(prof["rank"], {}).get("reported"):
            out[prof["rank"]]["profiler_hits"] = kernel_names.hits([prof], names)
    return out


def _judge_ranks(ev: dict, ranks: dict[int, dict], by_names: bool) -> None:
    """Under tensor parallelism an exercised slot must be proven on every rank: else it was not exercised."""
    if not ranks:
        return
    ev["ranks"] = ranks
    missing = _ranks_without_proof(ranks, by_names)
    if missing:
        ev["status"] = E.NOT_EXERCISED
        ev["proof"] += f"; but not on every tensor-parallel rank: {'; '.join(missing)}"
    else:
        ev["proof"] += f", on each of the {len(ranks)} tensor-parallel ranks"


def _ranks_without_proof(ranks: dict[int, dict], by_names: bool) -> list[str]:
    """Why each rank gives no proof that the kernel ran there (a rank known to have no layer for the slot needs
    none; one whose layers are unknown does)."""
    out = []
    for r, ev in sorted(ranks.items()):
        if not ev["reported"]:
            out.append(f"rank {r}: no evidence reported")
        elif ev["layers"] == 0:
            continue
        elif by_names and "profiler_hits" not in ev:
            out.append(f"rank {r}: not profiled")
        elif not (ev.get("profiler_hits", 0) if by_names else ev["calls"]):
            out.append(f"rank {r}: {'no launch of its kernels' if by_names else 'no call'}")
    return out


def _by_names(mode: str, names, profile) -> bool:
    """Whether a slot's proof is its declared kernels' launches in the profile: under CUDA graphs or torch.compile
    whenever it was profiled, in eager mode where the profile saw device kernels (a kernel that only wraps the
    engine's own op is called, yet launches none of its names)."""
    if not names or profile is None:
        return False
    return mode != "eager" or bool(kernel_names.launched(profile))


def _ran_how(ev: dict, mode: str, names, profile) -> tuple[str, str]:
    """(status, proof) of a slot whose model built layers for it, from the evidence ``mode`` asks for."""
    if ev["native_path"] and not ev["calls"]:
        return E.EXERCISED, (f"the engine's own kernel left on the engine's own path, as stock runs it: "
                             f"{ev['native_path']}x (once per compiled trace, or per call outside one)")
    if _by_names(mode, names, profile):
        return (_ran(ev["profiler_hits"] > 0),
                f"{ev['profiler_hits']} launches of {'/'.join(names)} in a profiled step")
    if mode == "eager":
        return _ran(ev["calls"] > 0), f"{ev['calls']} calls in the worker(s)"
    if mode == "graphs":
        return _ran(ev["calls"] > 0), f"{ev['calls']} calls in the worker(s) (CUDA-graph capture and eager steps)"
    how = (f"traced into the compiled graph {ev['traced']}x" if ev["traced"] else
           "not traced in this process: its compiled graph came from the compile cache")
    return _ran(ev["calls"] > 0), f"op run {ev['calls']}x (capture/eager), {how}"


def _own_inside(ev: dict) -> None:
    """Mark an exercised slot whose kernel is the engine's own: handed back by the plugin, or run inside every one of
    its calls (a wrapper around the native its factory was given) or of its watched calls (a kernel calling the
    engine's op itself, ``op_watch``); a kernel that did so in some calls (a fallback) says how many."""
    if ev.get("kernel_library"):
        ev["proof"] = (f"{ev['kernel_library']}'s kernels, which the plugin requires rather than ships (no speedup is "
                       "claimed for the plugin): " + ev["proof"])
    if ev.get("engine_own"):
        ev["proof"] = "the engine's own kernel, handed back by the plugin (no speedup is claimed): " + ev["proof"]
        return
    inside, calls = ev.get("native_inside", 0), ev["calls"]
    if inside:
        _inside(ev, inside, calls, f"the engine's own op ran inside every call of the plugin's kernel ({inside} of "
                f"{calls}: the native its factory was given; no speedup is claimed): ",
                f"; {inside} of its {calls} calls ran the engine's own op inside (a fallback)")
        return
    watched, inside, ops = ev.get("ops_watched", 0), ev.get("engine_ops_inside", 0), ", ".join(ev.get("native_ops", []))
    if inside:
        _inside(ev, inside, watched, f"the engine's own op ({ops}) ran inside every watched call of the plugin's "
                f"kernel ({inside} of {watched}: the first 4 and each power of two; no speedup is claimed): ",
                f"; {inside} of its {watched} watched calls ran the engine's own op ({ops}) inside (a fallback)")


def _unnamed(ev: dict, on_device: bool) -> None:
    """Mark an exercised slot of the plugin's own whose kernel declares no names, in a run ``on_device``: fk cannot
    tell its launches from the engine's (a plain function may launch the engine's Triton or C++ kernels with no op
    the watch sees), so no speedup is claimed for it."""
    if not on_device or ev.get("engine_own") or ev.get("kernel_library") or ev["kernel_names"]:
        return
    ev["unnamed"] = True
    ev["proof"] = ("declares no kernel names: its launches cannot be told from the engine's own (no speedup is "
                   "claimed): " + ev["proof"])


def _inside(ev: dict, inside: int, of: int, every: str, some: str) -> None:
    """The engine's op ran inside ``inside`` of ``of`` calls: in all, the slot is the engine's own (``every`` leads
    its proof); in some, ``some`` ends it."""
    if inside >= of:
        ev["engine_own"] = True
        ev["proof"] = every + ev["proof"]
    else:
        ev["proof"] += some


def judge(result: dict, loads: list[dict], mode: str, native: set[str] | frozenset = frozenset(),
          device: str = "") -> dict:
    """Evidence per installed slot for one candidate run; ``mode`` is one of MODES; ``native``: the kernel names
    the stock engine launches (the baseline's profile, ``kernel_names.known_native``); ``device``: the run's (any
    but "cpu" needs declared names for a kernel to claim speed, as a profile that saw device kernels does)."""
    if mode not in MODES:
        raise ValueError(f"unknown evidence mode {mode!r}")
    probes, profile = result.get("probe", []), result.get("profile")
    on_device = device not in ("", "cpu") or bool(kernel_names.launched(profile))
    meta, stock_layers = kernel_meta(loads), probe.merged(probes, "stock_layers")
    installed = installed_kernels(loads)
    declared = {s: meta.get((i["plugin"], s), {}) for s, i in installed.items()}
    unproven = kernel_names.unproven({s: d["kernel_names"] for s, d in declared.items() if d.get("kernel_names")},
                                     {s: d.get("kernel_names_defined", []) for s, d in declared.items()}, native,
                                     {s: d.get("kernel_names_in_engine", []) for s, d in declared.items()})
    slots = {}
    for slot, info in installed.items():
        key = op_key(info["plugin"], slot)
        names = declared[slot].get("kernel_names", [])
        ev = {"plugin": info["plugin"], "kernel": info["kernel"], "entered": info["entered"],
              "layers": _sum(probes, "constructed", slot), "calls": _sum(probes, "calls", key),
              "traced": _sum(probes, "traced", key), "native_path": _sum(probes, "native_path", key),
              "native_inside": _sum(probes, "native_inside", key), "ops_watched": _sum(probes, "ops_watched", key),
              "engine_ops_inside": _sum(probes, "engine_ops_inside", key),
              "native_ops": sorted({n for p in probes for n in p.get("native_ops", {}).get(key, [])}),
              "profiler_hits": 0 if slot in unproven else kernel_names.hits(profile, names),
              "profiled": profile is not None, "kernel_names": names,
              **({"engine_own": True} if info.get("engine_own") else {}),
              **({"kernel_library": declared[slot]["kernel_library"]} if declared[slot].get("kernel_library") else {})}
        if slot in unproven:
            ev["status"], ev["proof"] = E.NOT_PROVEN, "; ".join(unproven[slot])
        elif ev["layers"] == 0:
            stock = stock_layers[slot]
            ev["status"], ev["proof"] = E.NOT_APPLICABLE, (
                f"no layer the model built can route here ({stock} left stock, see the notes)" if stock
                else "the model built no layer for this slot")
        else:
            ev["status"], ev["proof"] = _ran_how(ev, mode, names, profile)
        if ev["status"] == E.EXERCISED:
            _own_inside(ev)
            _unnamed(ev, on_device)
            _judge_ranks(ev, rank_evidence(probes, profile, slot, key, names), _by_names(mode, names, profile))
        slots[slot] = ev
    errors = [f"pid {r['pid']}: {r['error']}" for r in loads if r.get("error")]
    errors += [f"pid {r['pid']}: plugin {p['name']!r} failed to load: {p['error']}"
               for r in loads for p in r.get("plugins", []) if p.get("error")]
    loaded_pids = {r["pid"] for r in loads}
    workers = [{"pid": p["pid"], "plugins_loaded": p["pid"] in loaded_pids,
                **({"rank": p["rank"]} if "rank" in p else {})} for p in probes]
    return {"slots": slots, "processes": [{"pid": r["pid"], "role": r.get("role", ""),
                                           "inherited_from": r.get("inherited_from")} for r in loads],
            "workers": workers, "load_errors": errors}
