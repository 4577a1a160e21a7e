"""Check one plugin kernel against the engine's own kernel for one slot, in this process.

    python -m fk_adapters.check.driver JOB.json RESULT.json

The runner starts one such process per (plugin, slot) with a time limit. Everything the timing
relies on is saved before the plugin is imported; the engine's kernels come from the engine's
natives module (``EngineSpec.natives``).
"""
from __future__ import annotations

import importlib
import math
import sys

from fk_adapters import groups, op_watch, probe
from fk_adapters.check import compiled, guards, scales, signature, timing
from fk_adapters.engines.driver_common import main, phase


def _clone(args: tuple) -> tuple:
    return tuple(a.clone() if hasattr(a, "clone") else a for a in args)


def _exact_inputs(args: tuple) -> tuple:
    return tuple(a.double() if hasattr(a, "is_floating_point") and a.is_floating_point() else
                 (a.clone() if hasattr(a, "clone") else a) for a in args)


def _results(slot, ret, args: tuple) -> tuple:
    if not slot.in_place:
        return (ret,)
    return tuple(args[i] for i in slot.mutated_positions() if args[i] is not None)


def _poison_pool(like: tuple, device: str) -> None:
    """Leave NaN in the allocator's free blocks of the result's size: an unwritten result shows it."""
    import torch

    if device != "cuda":
        return
    blocks = [torch.full_like(t, float("nan")) for t in like for _ in range(4) if t.is_floating_point()]
    del blocks


def correctness_round(slot, sig, cand, eng, device: str, seed: int, prev=None, scale: str = "normal",
                      values: dict | None = None) -> tuple[list[str], dict, tuple]:
    """One round on fresh inputs at ``scale`` (``values``: the signature's recorded value statistics):
    (problems, stats, (result, exact)) of the candidate."""
    args = signature.make_inputs(slot, sig, device, seed, scale=scale, stats=values)
    dtype = guards.dtype_name(args[slot.dtype_arg])
    exact = slot.run_reference(_exact_inputs(args))
    eng_args = _clone(args)
    engine_out = _results(slot, groups.run_as_every_rank(eng, eng_args), eng_args)
    before, mine = _clone(args), _clone(args)
    _poison_pool(engine_out, device)
    threads = guards.live_threads()
    ret = groups.run_as_every_rank(cand, mine)  # a collective's kernel: called on every rank of a world, rank 0 judged
    problems = guards.new_threads(threads)
    if slot.in_place and ret is not None:
        problems.append(f"{slot.name} works in place and must return None, returned {type(ret).__name__}")
    if not slot.in_place:
        problems += guards.plain_tensor(ret, engine_out[0])
        if not problems:
            problems += guards.aliases(ret, mine)
    if problems:
        return problems, {}, (None, exact)
    got = _results(slot, ret, mine)
    problems += guards.unchanged(before, mine, set(slot.mutated_positions()))
    stats: dict = {}
    for g, e, x in zip(got, engine_out, exact):
        p, st = guards.compare(g, e, x, dtype)
        problems += p
        for k, v in st.items():
            stats[k] = v if stats.get(k) is None or (v is not None and v > stats[k]) else stats[k]
    if prev is not None:
        problems += guards.cached(prev[0], got, prev[1], exact)
    return problems, stats, (tuple(g.clone() for g in got), exact)


def check_signature(slot, sig: list, cand, eng, device: str, clock: timing.Clock, cfg: dict, seed: int,
                    integrity: guards.TimingIntegrity | None = None, values: dict | None = None,
                    native=None) -> dict:
    """Correctness rounds at each scale (``scales.plan``), interleaved timing, escape check, a last round
    after the timing, and whether any timing function was replaced meanwhile. ``native(args)``: the engine's
    compiled native forward for these arguments (``compiled.Native``), timed beside the two kernels."""
    row = _check_signature(slot, sig, cand, eng, device, clock, cfg, seed, values, native)
    if integrity is not None:
        row["problems"] += integrity.changed()
    return row


def _scale_rounds(row: dict, slot, sig, cand, eng, device, seed, values, rounds: int) -> None:
    """Every round of ``scales.plan``, even after one fails: ``row["scales"]`` says which scales passed."""
    prev, base = None, scales.base(values)
    for r, scale in enumerate(scales.plan(values, rounds)):
        problems, stats, prev = correctness_round(slot, sig, cand, eng, device, seed + r, prev, scale, values)
        row["problems"] += [f"at {scale} scale: {p}" for p in problems]
        if scale == base:
            row.update(stats)
        done = row["scales"].setdefault(scale, {"rounds": 0, "failed": 0})
        done["rounds"] += 1
        done["failed"] += bool(problems)
        for k in ("max_abs_vs_engine", "max_abs_vs_exact", "engine_max_abs_vs_exact"):
            if stats.get(k) is not None:
                done[k] = max(done.get(k, 0.0), stats[k])
    row["failed_scales"] = [s for s, d in row["scales"].items() if d["failed"]]


def compiled_baseline(slot, sig, native, eng, device, seed, scale, values) -> tuple:
    """(the engine's compiled native forward for ``sig``, or None; what it is, or why it is not timed). Built and
    compiled here (its compile time outside the timing); it must be a compiled graph of torch ops (never the engine's
    kernel) and agree with the engine's kernel as a candidate must."""
    args = signature.make_inputs(slot, sig, device, seed, scale=scale, stats=values)
    try:
        built = native(_clone(args))
        problems = compiled.fallback_problems(built)
        if not problems:
            eng_args = _clone(args)
            engine_out = _results(slot, eng(*eng_args), eng_args)
            dtype = guards.dtype_name(args[slot.dtype_arg])
            for g, e, x in zip(built.fn(*_clone(args)), engine_out, slot.run_reference(_exact_inputs(args))):
                problems += guards.compare(g, e, x, dtype)[0]
    except Exception as exc:  # the engine's forward, not the plugin: reported, never the plugin's failure
        return None, {"error": f"{type(exc).__name__}: {exc}"[:500]}
    if problems:
        return None, {"error": "; ".join(problems)[:500]}
    return built, {"source": built.source, "graphs": len(built.graphs), "graph_ops": built.graph_ops()}


def _check_signature(slot, sig, cand, eng, device, clock, cfg, seed, values=None, native=None) -> dict:
    row: dict = {"args": sig, "problems": [], "flags": [], "scales": {}}
    _scale_rounds(row, slot, sig, cand, eng, device, seed, values, cfg.get("rounds", 3))
    if slot.untimed:
        row["untimed"] = slot.untimed
    if row["problems"] or slot.untimed:
        return row
    base = scales.base(values)
    fns = {"candidate": cand, "engine": eng}
    if native is not None:
        built, row["compiled_baseline"] = compiled_baseline(slot, sig, native, eng, device, seed + 200, base, values)
        if built is None:
            row["flags"].append(f"the engine's compiled native forward: {row['compiled_baseline']['error']}: "
                                "no ratio against it")
        else:
            fns["compiled"] = built.fn
    sets0 = signature.make_inputs(slot, sig, device, seed + 100, scale=base, stats=values)
    traffic = slot.traffic(*sets0) if slot.traffic else 0  # before the timing: it may read the inputs (a sync)
    n = timing.buffer_sets(sum(a.numel() * a.element_size() for a in sets0 if hasattr(a, "numel")), clock.flush_bytes)
    sets = [sets0] + [signature.make_inputs(slot, sig, device, seed + 101 + k, scale=base, stats=values)
                      for k in range(n - 1)]
    times, host, spun = timing.bench_pair(clock, fns, sets, cfg.get("warmup", 10), cfg.get("repeats", 50))
    row["candidate"], row["engine"] = timing.summary(times["candidate"]), timing.summary(times["engine"])
    if "compiled" in times:
        row["compiled"] = timing.summary(times["compiled"])
    if host["candidate"]:
        row["host"] = {n: timing.summary(host[n]) for n in host}
        row["spin_s"] = spun
        row["launch_in_device_time"] = [n for n in host if row["host"][n]["median_s"] > spun[n]]
        row["flags"] += [f"{n}: its host launch ({row['host'][n]['median_s'] * 1e6:.0f} µs) outlasts the GPU spin that "
                         f"hides it ({spun[n] * 1e6:.0f} µs): the device time includes launch work"
                         for n in row["launch_in_device_time"]]
    row["buffer_sets"] = n
    row["wall_over_span"] = {"candidate": clock.wall_over_span(cand, sets), "engine": clock.wall_over_span(eng, sets)}
    row["problems"] += guards.escaped(row["wall_over_span"]["candidate"], row["wall_over_span"]["engine"])
    problems, _, _ = correctness_round(slot, sig, cand, eng, device, seed + 999, scale=base, values=values)
    row["problems"] += [f"after timing: {p}" for p in problems]
    c, e = row["candidate"]["median_s"], row["engine"]["median_s"]
    row["speedup"] = e / c if c > 0 else math.inf
    if "compiled" in row:
        row["speedup_compiled"] = row["compiled"]["median_s"] / c if c > 0 else math.inf
    row["traffic_bytes"] = traffic
    row["candidate_Bps"], row["engine_Bps"] = timing.rates(traffic, c, e)
    if slot.flops:
        row["flops"] = slot.flops(*sets0)
        row["candidate_flops_per_s"], row["engine_flops_per_s"] = timing.rates(row["flops"], c, e)
    return row


def _load(job: dict):
    """(candidate, engine kernel) callables for the job's slot, and whether the candidate is the engine's kernel itself
    (``loading.engine_own``: an adapter may leave its calls on the engine's own path)."""
    from fk_adapters.engines import get
    from fk_adapters.engines.loading import engine_own, kernel_callable
    from fk_adapters.plugins import load_plugins, select_kernels

    spec = get(job["engine"])
    if spec.natives_setup:
        importlib.import_module(spec.natives_setup)
    natives = importlib.import_module(spec.natives).NATIVES
    plugins = load_plugins([job["plugin"]], strict=True, engine=spec.name, device=job["device"])
    chosen, notes = select_kernels(plugins, spec.name, job["device"])
    if job["slot"] not in chosen:
        raise LookupError(f"plugin {job['plugin']} offers no {job['slot']} kernel for {spec.name} on {job['device']}"
                          + (f" ({'; '.join(notes)})" if notes else ""))
    kernel, native = chosen[job["slot"]][1], natives[job["slot"]]
    return kernel_callable(kernel, natives, ENGINE_OP_KEY), native, engine_own(kernel, natives, job["slot"])


ENGINE_OP_KEY = "fk-check:candidate"  # counts the candidate's calls of the native its factory was given


def _compiled_native(job: dict, res: dict):
    """``build(args)`` of the slot's compiled native forward where the engine's compiled mode runs one, else None;
    ``res["compiled_baseline"]`` says which, and why (``compiled.Plan``)."""
    engine = compiled.engine_module(job["engine"])
    try:
        plan = engine.plan(job["slot"]) if engine else compiled.no_compile_plan(job["engine"])
    except Exception as exc:  # an engine whose compiled config cannot be read: said, not taken for "eager"
        res["compiled_baseline"] = {"compiles": None, "error": f"{type(exc).__name__}: {exc}"[:500]}
        return None
    res["compiled_baseline"] = plan.as_dict()
    return (lambda args: engine.build(job["slot"], args)) if plan.compiles else None


def _ops_inside(row: dict, slot, w: dict, cand, eng, device: str, seed: int) -> None:
    """Flag a candidate that dispatches the engine's own op itself (``op_watch``), from one call on the side."""
    args = signature.make_inputs(slot, w["args"], device, seed, stats=w.get("value_stats"))
    try:
        ops = op_watch.runs_native(cand, eng, args, _clone)
    except Exception:  # noqa: BLE001 (the candidate's own failures are the correctness rounds' to report)
        return
    if ops:
        row["flags"].append(f"the candidate dispatched the engine's own op ({', '.join(ops)}) itself: what was "
                            "timed is the engine's kernel")


def run(job: dict) -> dict:
    from fk_adapters.tasks import SLOTS

    integrity = guards.TimingIntegrity()  # before the plugin is imported
    clock = timing.Clock(job["device"], integrity.saved)
    slot = SLOTS[job["slot"]]
    cand, eng, own = _load(job)
    res = {"status": "ok", "engine": job["engine"], "plugin": job["plugin"], "slot": job["slot"],
           "device": job["device"], "engine_own": own, "shapes": []}
    native = _compiled_native(job, res)
    if job["device"] == "cuda":
        import torch

        res["device_name"] = torch.cuda.get_device_name()
    res["spin_s"] = clock.spin_s
    phase("measuring the copy ceiling")
    res["copy_ceiling_Bps"] = timing.copy_ceiling(clock)
    for i, w in enumerate(job["signatures"]):
        phase(f"{job['slot']}: shape {i + 1}/{len(job['signatures'])}")
        signature.validate(slot, w["args"])
        entered = probe.native_entered[ENGINE_OP_KEY]
        row = check_signature(slot, w["args"], cand, eng, job["device"], clock, job.get("config", {}),
                              seed=1000 * i, integrity=integrity, values=w.get("value_stats"), native=native)
        row["calls"] = w.get("calls", 1)
        inside = probe.native_entered[ENGINE_OP_KEY] - entered
        if inside and not own:
            row["flags"].append(f"the candidate ran the engine's own op inside it ({inside} calls of the native its "
                                "factory was given): what was timed is partly the engine's kernel")
        elif not own and slot.name not in op_watch.UNWATCHED:
            _ops_inside(row, slot, w, cand, eng, job["device"], 1000 * i)
        if w.get("value_stats"):
            row["value_stats"] = w["value_stats"]
        res["shapes"].append(row)
    return res


if __name__ == "__main__":
    sys.exit(main(run))
