"""Run ``fk check``: one process per (workload, plugin, slot), then per-slot summaries."""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform

from fk_adapters import __version__, gpu_share
from fk_adapters.check import prediction, timing
from fk_adapters.results import CheckStatus, Kind, stamp, verdict
from fk_adapters.runner.proc import run_job

DRIVER = "fk_adapters.check.driver"
FLAG_SPEEDUP = 2.0  # above this, a speedup over the engine's own kernel is flagged for review
CEILING_SLACK = 1.05


def weighted_geomean(pairs: list[tuple[float, int]]) -> float | None:
    """exp(sum(w log x) / sum(w)) over (x, w) with x > 0."""
    pairs = [(x, w) for x, w in pairs if x and x > 0 and math.isfinite(x) and w > 0]
    if not pairs:
        return None
    return math.exp(sum(w * math.log(x) for x, w in pairs) / sum(w for _, w in pairs))


def speedup_range(row: dict, base: str = "engine") -> tuple[float, float] | None:
    """The speedup's spread: ``base`` (the engine's kernel, or its ``compiled`` native forward) over candidate time,
    each taken at the far ends of its interquartile range (a 1.00x that is real lies inside it)."""
    c, e = row.get("candidate") or {}, row.get(base) or {}
    if not c.get("n") or not e.get("n") or not c.get("q1_s", 0) > 0 or "q3_s" not in e:
        return None
    return e["q1_s"] / c["q3_s"], e["q3_s"] / c["q1_s"]


def device_times_only(row: dict, base: str = "engine") -> bool:
    """Whether ``base``'s and the candidate's times of this shape are device times alone: neither side's host launch
    outlasted the spin that hides it (such a ratio is left out of the slot's figures)."""
    return not {"candidate", base} & set(row.get("launch_in_device_time") or [])


def timed_shapes(shapes: list[dict], base: str = "engine") -> list[dict]:
    return [r for r in shapes if device_times_only(r, base)]


def slot_speedup_range(shapes: list[dict], base: str = "engine") -> tuple[float, float] | None:
    """Call-weighted geomeans of the per-shape lower and upper speedup bounds."""
    ranges = [(speedup_range(r, base), r["calls"]) for r in timed_shapes(shapes, base)]
    if not ranges or any(r is None for r, _ in ranges):
        return None
    lo = weighted_geomean([(r[0], w) for r, w in ranges])
    hi = weighted_geomean([(r[1], w) for r, w in ranges])
    return None if lo is None or hi is None else (lo, hi)


def slot_flop_rates(shapes: list[dict]) -> tuple[float, float] | None:
    """(candidate, engine) floating-point operations per second over all of a slot's calls: the call-weighted
    operations over the call-weighted median times; None where a shape has no operation count."""
    if not shapes or any(r.get("flops") is None or not (r.get("candidate") or {}).get("n") for r in shapes):
        return None
    ops = sum(r["calls"] * r["flops"] for r in shapes)
    return timing.rates(ops, *(sum(r["calls"] * r[n]["median_s"] for r in shapes) for n in ("candidate", "engine")))


def flags(row: dict, ceiling: float, flag_speedup: float) -> list[str]:
    out = []
    if row.get("speedup", 0) > flag_speedup:
        out.append(f"speedup {row['speedup']:.2f}x over the engine's kernel: review before trusting it")
    if ceiling and row.get("candidate_Bps", 0) > CEILING_SLACK * ceiling:
        out.append(f"{row['candidate_Bps'] / ceiling:.2f}x the measured copy ceiling: impossible, the timing is wrong")
    return out


def failed_at(entry: dict) -> str:
    """`` at scale tiny, large`` for a slot whose shapes failed at those input scales."""
    return f" at scale {', '.join(entry['failed_scales'])}" if entry.get("failed_scales") else ""


_ITEM_BYTES = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2,
               "int8": 1, "uint8": 1, "bool": 1}


def work(sig: dict) -> float:
    """A signature's share of the slot's work: its calls x the bytes of its tensor arguments (where the time goes,
    not just what is called most: a long prefill is called as often as a short one)."""
    nbytes = sum(math.prod(a["shape"]) * _ITEM_BYTES.get(str(a.get("dtype", "")).replace("torch.", ""), 4)
                 for a in sig.get("args", []) if isinstance(a, dict) and a.get("shape") is not None)
    return sig.get("calls", 1) * max(nbytes, 1)


def time_ratio(shapes: list[dict]) -> float | None:
    """The engine's time over the candidate's summed over the checked calls (calls x median device time): what the
    slot's share of a run would become. None unless every shape was timed."""
    if not shapes or any(not (r.get("engine") or {}).get("median_s") or not (r.get("candidate") or {}).get("median_s")
                         for r in shapes):
        return None
    shapes = timed_shapes(shapes)
    if not shapes:
        return None
    return (sum(r["calls"] * r["engine"]["median_s"] for r in shapes)
            / sum(r["calls"] * r["candidate"]["median_s"] for r in shapes))


def compiled_speedup(shapes: list[dict]) -> float | None:
    """The call-weighted geomean speedup over the engine's compiled native forward: None unless every shape has one."""
    if not shapes or any(r.get("speedup_compiled") is None for r in shapes):
        return None
    return weighted_geomean([(r["speedup_compiled"], r["calls"]) for r in timed_shapes(shapes, "compiled")])


STOCK = "stock"


def predictor(plan: dict | None, mode: str, engine_own: bool = False) -> tuple[str | None, str]:
    """Which speedup predicts the end-to-end delta of an ``fk run`` in ``mode``: ("eager" | "compiled" | "stock" |
    None, why); "stock": none, the run's calls stay on the engine's own path (a delta of 1)."""
    if mode != "compiled":
        return "eager", "fk run --mode eager runs the engine's kernels"
    if not plan or plan.get("compiles") is None:
        return None, "the engine's compiled mode could not be read" + (f": {plan['error']}" if plan else "")
    if plan["compiles"] and engine_own:
        return STOCK, ("the plugin's kernel is the engine's own op: in compiled mode fk leaves its calls on the "
                       "engine's native path, as stock runs them, so a run sees none of the ratios timed here")
    if plan["compiles"]:
        return "compiled", "the engine's compiled mode runs the slot's native forward through Inductor"
    return "eager", plan.get("why", "")


def summarise(res: dict, flag_speedup: float = FLAG_SPEEDUP, mode: str = "eager") -> dict:
    """Status, flags and the call-weighted geomean speedups of one slot's driver result (over the engine's kernel,
    and over its compiled native forward where its compiled mode runs one), and which predicts a run in ``mode``."""
    if res.get("status") != "ok":
        return {"status": CheckStatus.TIMEOUT if res.get("status") == "timeout" else CheckStatus.RUNTIME_ERROR,
                "error": res.get("error", res.get("status")), "log": res.get("log"), "shapes": []}
    ceiling = res.get("copy_ceiling_Bps", 0.0)
    for row in res["shapes"]:
        row["flags"] = row.get("flags", []) + flags(row, ceiling, flag_speedup)
        if ceiling and row.get("candidate_Bps") is not None:
            row["candidate_frac_ceiling"] = row["candidate_Bps"] / ceiling
            row["engine_frac_ceiling"] = row["engine_Bps"] / ceiling
    bad = [r for r in res["shapes"] if r["problems"]]
    failed_scales = list(dict.fromkeys(s for r in res["shapes"] for s in r.get("failed_scales", [])))
    plan = res.get("compiled_baseline")
    predicts, why = predictor(plan, mode, bool(res.get("engine_own")))
    compiled_geomean = None if bad or not (plan or {}).get("compiles") else compiled_speedup(res["shapes"])
    eager = [(r.get("speedup"), r["calls"]) for r in timed_shapes(res["shapes"])]
    eager_geomean = None if bad else weighted_geomean(eager)
    return {"status": verdict.check_slot(bool(bad)), "shapes": res["shapes"], "copy_ceiling_Bps": ceiling,
            "compiled_baseline": plan, "predicts": predicts, "predicts_why": why,
            "engine_own": bool(res.get("engine_own")),
            "geomean_speedup_compiled": compiled_geomean,
            "geomean_speedup_compiled_range": None if compiled_geomean is None else
            slot_speedup_range(res["shapes"], "compiled"),
            "predicted_speedup": {"eager": eager_geomean, "compiled": compiled_geomean, STOCK: 1.0}.get(predicts),
            "failed_scales": failed_scales,
            "device_name": res.get("device_name"), "log": res.get("log"),
            "calls": sum(r["calls"] for r in res["shapes"]),
            "geomean_speedup": eager_geomean,
            "time_ratio": None if bad else time_ratio(res["shapes"]),
            "geomean_speedup_range": None if bad else slot_speedup_range(res["shapes"]),
            "flops_per_s": None if bad else slot_flop_rates(res["shapes"]),
            "flagged": sum(bool(r["flags"]) for r in res["shapes"]),
            "launch_in_device_time": sum(bool(r.get("launch_in_device_time")) for r in res["shapes"]),
            "left_out": {b: len(res["shapes"]) - len(timed_shapes(res["shapes"], b)) for b in ("engine", "compiled")},
            "untimed": next((r["untimed"] for r in res["shapes"] if r.get("untimed")), "")}


def run_check(spec, plugin_slots: dict[str, list[str]], workloads: list[dict], device: str, out_dir: str,
              config: dict, timeout_s: float, max_shapes: int = 0, command: str = "", engine_version: str = "",
              echo=print) -> dict:
    """``plugin_slots``: {plugin: [slots it offers for this engine and device]}."""
    os.makedirs(out_dir, exist_ok=True)
    results = {**stamp(Kind.CHECK), "fk_version": __version__, "engine": spec.name, "engine_version": engine_version,
               "device": device, "host": platform.node(), "command": command, "config": config,
               "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "workloads": [w.get("path", "") for w in workloads], "slots": []}
    path = os.path.join(out_dir, "results.json")

    total = sum(len(wl["slots"]) for wl in workloads) * len(plugin_slots)

    def save() -> None:  # after every slot: an interrupted check keeps what finished, as a FAIL
        finish(results, (len(results["slots"]), total))
        results["run_predictions"] = prediction.run_predictions(results["slots"], workloads)
        with open(path, "w") as f:
            json.dump(results, f, indent=1, default=str)

    for wl in workloads:
        for plugin, offered in plugin_slots.items():
            for slot, sigs in wl["slots"].items():
                entry = {"workload": wl.get("scenario", "?"), "plugin": plugin, "slot": slot}
                if slot not in offered:
                    results["slots"].append({**entry, "status": CheckStatus.NOT_OFFERED, "shapes": []})
                    continue
                chosen = sorted(sigs, key=lambda s: -work(s))[: max_shapes or None]
                job = {"engine": spec.name, "plugin": plugin, "slot": slot, "device": device, "signatures": chosen,
                       "config": config}
                echo(f"{entry['workload']} {plugin}:{slot}: {len(chosen)} of {len(sigs)} shapes")
                run_dir = os.path.join(out_dir, "logs", entry["workload"], plugin, slot)
                res = run_job(spec.python, DRIVER, job, run_dir, spec.env(device), timeout_s,
                              echo=lambda m: echo(f"  {m}"), watch_gpu=device == "cuda")
                entry.update(summarise(res, config.get("flag_speedup", FLAG_SPEEDUP), config.get("mode", "eager")))
                shared = gpu_share.foreign(res)
                if shared:  # its timings ran beside another GPU process
                    entry["gpu_shared_with"] = shared
                    echo(f"{entry['workload']} {plugin}:{slot}: WARNING: another process used the GPU during its "
                         f"timings ({gpu_share.describe(shared)}): they are not comparable")
                entry["shapes_skipped"] = len(sigs) - len(chosen)
                entry["calls_captured"] = sum(s.get("calls", 1) for s in sigs)
                results["slots"].append(entry)
                echo(f"{entry['workload']} {plugin}:{slot}: {entry['status']}"
                     + failed_at(entry)
                     + (f", geomean speedup {entry['geomean_speedup']:.3f}" if entry.get("geomean_speedup") else "")
                     + (f" (launch work in the device time of {entry['launch_in_device_time']} of "
                        f"{len(entry['shapes'])} shapes: ratios with those times left out)"
                        if entry.get("launch_in_device_time") else "")
                     + (f", {entry['geomean_speedup_compiled']:.3f} over the compiled native forward"
                        if entry.get("geomean_speedup_compiled") else ""))
                save()
    save()
    return results


def finish(results: dict, progress: tuple[int, int] | None = None) -> None:
    """The check's problems and verdict (``results.verdict``); ``progress`` (checks done, of how many): a file
    written mid-check reads as failed until the last check is in."""
    results["problems"] = verdict.check_problems(results["slots"], failed_at)
    if progress:
        results["problems"] += verdict.unfinished(*progress, "plugin x slot checks")
    results["verdict"] = verdict.of_problems(results["problems"])
