"""Markdown for ``fk check`` results: per slot, then per shape."""
from __future__ import annotations

from tabulate import tabulate

from fk_adapters import gpu_share
from fk_adapters.check import scales, value_stats
from fk_adapters.check.guards import MEAN_SLACK, OUTLIER_SHARE, OUTLIER_SPAN, TOLERANCES
from fk_adapters.check.runner import STOCK, failed_at, slot_speedup_range
from fk_adapters.results import CheckResults, CheckStatus


def _us(s: dict | None, spread: bool = True) -> str:
    if not s or not s.get("n"):
        return "-"
    return f"{s['median_s'] * 1e6:.2f}" + (f" ±{50 * s['rel_iqr']:.0f}%" if spread else "")


def _mb(x) -> str:
    return "-" if not x else f"{x / 1e6:.3g}"


def _gbs(x) -> str:
    return "-" if x is None else f"{x / 1e9:.3g}"


def _tflops(candidate, engine) -> str:
    """``candidate / engine`` in TFLOP/s, or - for a slot without an operation count."""
    return "-" if candidate is None else f"{candidate / 1e12:.3g} / {engine / 1e12:.3g}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _covered(s: dict) -> str:
    shapes = s.get("shapes", [])
    if not shapes:
        return "-"
    total = len(shapes) + s.get("shapes_skipped", 0)
    captured = s.get("calls_captured")
    if not captured:
        return f"{len(shapes)}/{total}"
    return f"{len(shapes)}/{total} ({100 * s.get('calls', 0) / captured:.0f}% of calls)"


def shape_label(args: list) -> str:
    """The tensors' shapes and dtype, and the non-tensor flags, of one signature."""
    parts, dtype = [], ""
    for a in args:
        if a is None:
            parts.append("None")
        elif "shape" in a:
            parts.append("x".join(map(str, a["shape"])) or "scalar")
            dtype = dtype or (a["dtype"] if a["dtype"].startswith(("float", "bfloat")) else "")
        elif not isinstance(a["value"], float):
            parts.append(str(a["value"]))
    return f"{', '.join(parts)} {dtype}".strip()


def _slot_speedup(s: dict) -> str:
    if s.get("untimed"):
        return f"not timed: {s['untimed']}"
    if s.get("geomean_speedup") is None:
        return "-"
    rng = s.get("geomean_speedup_range") or slot_speedup_range(s.get("shapes", []))
    return f"{s['geomean_speedup']:.3f}" + (f" [{rng[0]:.3f}, {rng[1]:.3f}]" if rng else "") + _left_out(s, "engine")


def _left_out(s: dict, base: str) -> str:
    """The note on shapes whose ratio over ``base`` is left out (launch work in a side's device time); results made
    before shapes were left out counted them in, and say so."""
    of = len(s.get("shapes", []))
    if "left_out" not in s:
        n = s.get("launch_in_device_time") if base == "engine" else 0
        return f"; launch work in {n} of {of} shapes' device times" if n else ""
    n = s["left_out"].get(base, 0)
    return f"; {n} of {of} shapes left out (launch work in their device times)" if n else ""


def _slot_compiled(s: dict) -> str:
    """The speedup over the compiled native forward, ``= eager`` where the compiled mode runs the engine's kernel,
    or - (older results, no compiled baseline, or a shape without one)."""
    plan = s.get("compiled_baseline")
    if not plan:
        return "-"
    if plan.get("compiles") is False:
        return "= eager"
    if s.get("geomean_speedup_compiled") is None:
        return "-"
    rng = s.get("geomean_speedup_compiled_range")
    return (f"{s['geomean_speedup_compiled']:.3f}" + (f" [{rng[0]:.3f}, {rng[1]:.3f}]" if rng else "")
            + _left_out(s, "compiled"))


def _predicts(s: dict) -> str:
    which = s.get("predicts")
    if not which:
        return "-"
    value = s.get("predicted_speedup")
    return f"{which}" + (f" ({value:.3f})" if value is not None else "")


def _result(row: dict) -> str:
    if row["problems"]:
        return f"FAIL ({', '.join(row['failed_scales'])})" if row.get("failed_scales") else "FAIL"
    word = "review" if row.get("flags") else "ok"
    return f"{word} ({row['bad']} outside tol.)" if row.get("bad") else word


def _scales(row: dict) -> str:
    """The scales a shape's correctness rounds drew at, each with ok or FAIL."""
    tried = row.get("scales", {})
    return ", ".join(f"{s} {'FAIL' if d['failed'] else 'ok'}" for s, d in tried.items()) or "-"


def render_check(results) -> str:
    """The markdown report of ``fk check`` results (its record, or the results file's content)."""
    check = results if isinstance(results, CheckResults) else CheckResults.from_dict(results)
    lines = (_header(check) + ["", "## Per slot", "", _slot_table(check.slots)] + _baselines(check)
             + _prediction_lines(check.run_predictions))
    shared = [f"- **{s['workload']} {s['plugin']}:{s['slot']}**: another process used the GPU during its timings "
              f"({gpu_share.describe(s['gpu_shared_with'])}): its speedups are not comparable"
              for s in check.slots if s.get("gpu_shared_with")]
    if shared:
        lines += ["", "**Disturbed timings:**", ""] + shared
    rows, problems, flagged = _per_shape(check.slots)
    if rows:
        lines += ["", "## Per shape", "", PER_SHAPE_NOTE, "",
                  tabulate(rows, headers=["plugin", "slot", "shape", "calls", "traffic MB", "candidate µs", "engine µs",
                                          "compiled native µs", "cand. host µs", "engine host µs", "speedup",
                                          "vs compiled",
                                          "candidate GB/s", "of ceiling", "engine GB/s", "of ceiling",
                                          "TFLOP/s cand. / engine", "scales",
                                          "captured values", "result"],
                           tablefmt="github")]
    if problems:
        lines += ["", "## Problems", ""] + problems
    if flagged:
        lines += ["", "## Flagged for review", ""] + flagged
    return "\n".join(lines) + "\n"


PER_SHAPE_NOTE = (
    "Times: median per call ± half the interquartile range. On CUDA: device time (the host's launch "
    "work hidden behind a GPU spin, as under CUDA graphs), and apart from it the host time of each call "
    "(its launch cost in eager mode). Speedup: engine kernel over candidate device time; its spread per slot: the "
    "call-weighted geomeans of engine q1 / candidate q3 and engine q3 / candidate q1. Compiled native: the "
    "engine's own native forward of the slot compiled by Inductor as its compiled mode runs it, timed in the same "
    "interleaved rounds (vs compiled: its time over the candidate's; - where the compiled mode runs the engine's "
    "kernel or the results predate it). Bandwidth: the slot's "
    "least memory traffic per call (traffic MB: bytes read + written) over the median time, and its "
    "fraction of the copy ceiling measured in the same run. TFLOP/s (slots that count their floating-point "
    "operations, e.g. gemm, fused_moe): the operations per call over the median time.")


def _header(check: CheckResults) -> list[str]:
    lines = [f"# fk check: plugin kernels vs. {check.engine} {check.engine_version} kernels",
             "", f"**{check.verdict}**" + (f": {'; '.join(check.problems)}" if check.problems else ""),
             "", f"- device: {check.device}, fk {check.fk_version}, created {check.created}",
             f"- workloads: {', '.join(check.workloads) or '-'}"]
    if check.command:
        lines.append(f"- command: `{check.command}`")
    cfg = check.config
    if cfg.get("mode"):
        lines.append(f"- mode judged: {cfg['mode']} (which speedup predicts a run's delta: section Baselines)")
    return lines + [
        f"- per shape: {cfg.get('rounds', 3)} correctness rounds on fresh inputs "
        f"at the base scale (captured, where the workload has value statistics, else normal), one round at each "
        f"edge scale ({', '.join(scales.EDGES)}: σ {scales.TINY:g}, x{scales.LARGE:g} within the dtype's range, "
        f"one row x{scales.LARGE:g}), {cfg.get('warmup', 10)} warm-up "
        f"+ {cfg.get('repeats', 50)} timed calls per kernel, interleaved, each from an idle device with the L2 flushed "
        "(CUDA), inputs rotated over buffers larger than twice the L2; a last correctness round after the timing",
        "- tolerances against the engine's kernel (atol, rtol): "
        + ", ".join(f"{d} {a:g}/{r:g}" for d, (a, r) in TOLERANCES.items() if d != "float64")
        + "; an element outside them is still within bounds if it is as close to the float64 reference as the "
        "engine's, or no farther from it than the engine's worst element (the result's mean error vs float64 then "
        f"within {MEAN_SLACK:g}x the engine's); up to {OUTLIER_SHARE:.2%} of the elements may lie outside, each within "
        f"{OUTLIER_SPAN:g}x the tolerance (counted in the result column)"]


def _prediction_lines(predictions: list[dict]) -> list[str]:
    """The run each (workload, plugin) predicts, from the capture's device-time shares (``check/prediction.py``)."""
    if not predictions:
        return []

    def pct(d: dict) -> str:
        return ", ".join(f"{s} {100 * v:.1f}%" for s, v in sorted(d.items(), key=lambda kv: -kv[1])) or "-"

    rows = [[p["workload"], p["plugin"], "-" if p["speedup"] is None else f"{p['speedup']:.3f}", pct(p["weighed"]),
             pct(p["as_stock"]) + (f"; other kernels {100 * p['rest_as_stock']:.1f}%" if p["rest_as_stock"] else ""),
             ", ".join(p["not_passed"]) or "-"] for p in predictions]
    return ["", "## The run this predicts", "",
            "Each checked slot's predicting speedup (section Baselines) weighted by its share of the device time the "
            "workload's capture profiled; every slot not checked, and the kernels outside slot calls, taken as stock "
            "(1.000). A plugin that replaces a slot listed as stock changes the run there too, unpredicted. No "
            "prediction where a checked slot did not pass. Speedup: stock time / candidate time.", "",
            tabulate(rows, headers=["workload", "plugin", "predicted run speedup", "slots weighed (share)",
                                    "taken as stock (share)", "did not pass"], tablefmt="github",
                     disable_numparse=True)]


def _baselines(check: CheckResults) -> list[str]:
    """Per slot, what the compiled baseline is (or why it is the eager one) and which speedup predicts a run."""
    seen, lines = set(), []
    for s in check.slots:
        plan = s.get("compiled_baseline")
        if not plan or s["slot"] in seen:
            continue
        seen.add(s["slot"])
        what = (plan.get("includes") if plan.get("compiles") else
                f"the engine's kernel: {plan.get('why') or plan.get('error', '?')}")
        sources = sorted({r["compiled_baseline"]["source"] for r in s.get("shapes", [])
                          if (r.get("compiled_baseline") or {}).get("source")})
        lines.append(f"- **{s['slot']}**: compiled mode runs {what}"
                     + (f" (compiled: `{', '.join(sources)}`)" if sources else "")
                     + (f"; predicts the run's delta: the {s['predicts']} ratio" if s.get("predicts") else "")
                     + (f" ({s['predicts_why']})" if s.get("predicts_why") and s["predicts_why"] not in what else ""))
    stock: dict[str, tuple[list[str], str]] = {}
    for s in check.slots:
        if s.get("predicts") == STOCK:
            stock.setdefault(s["plugin"], ([], s["predicts_why"]))[0].append(s["slot"])
    lines += [f"- **{plugin}** ({', '.join(slots)}): predicts no change, 1.000: {why}"
              for plugin, (slots, why) in stock.items()]
    settings = next((s["compiled_baseline"]["settings"] for s in check.slots
                     if (s.get("compiled_baseline") or {}).get("settings")), None)
    if not lines:
        return []
    return ["", "## Baselines", "", BASELINES_NOTE.format(mode=check.config.get("mode", "eager")), ""] + lines + (
        [f"- the engine's compile settings read: {_settings(settings)}"] if settings else [])


BASELINES_NOTE = (
    "Mode judged: **{mode}**. Each slot's candidate is timed against the engine's kernel (eager) and, where the "
    "engine's compiled mode runs the slot's native torch forward through Inductor instead (vLLM: custom ops off under "
    "Inductor), against that forward taken from the engine's own code and compiled the same way (the token count "
    "symbolic, whole graph; compile time excluded). The ratio that predicts an end-to-end run's delta: in compiled "
    "mode the compiled one for the slots the engine compiles, the eager one for those it keeps as its kernels; in "
    "eager mode (and for SGLang, which runs no torch.compile by default) the eager one.")


def _settings(settings: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in settings.items() if v not in (None, "", [], {}))


def _slot_table(slots: list[dict]) -> str:
    table = [[s["workload"], s["plugin"], s["slot"], s["status"] + failed_at(s), _covered(s), _slot_speedup(s),
              f"{s['time_ratio']:.3f}" if s.get("time_ratio") else "-", _slot_compiled(s), _predicts(s),
              _tflops(*(s.get("flops_per_s") or (None, None))), _gbs(s.get("copy_ceiling_Bps")), s.get("flagged", 0)]
             for s in slots]
    return tabulate(table, headers=["workload", "plugin", "slot", "status", "shapes (calls) checked of captured",
                                    "speedup vs engine kernel (call-weighted geomean) [spread]",
                                    "engine / candidate time (checked calls)", "vs compiled native [spread]",
                                    "predicts a run",
                                    "TFLOP/s cand. / engine (all calls)", "copy ceiling GB/s", "flagged"],
                    tablefmt="github")


def _per_shape(slots: list[dict]) -> tuple[list[list], list[str], list[str]]:
    """The per-shape table's rows, and the problem and flag lines of every shape (and of slots that crashed)."""
    rows, problems, flagged = [], [], []
    for s in slots:
        for r in s.get("shapes", []):
            label = shape_label(r["args"])
            host = r.get("host", {})
            rows.append([s["plugin"], s["slot"], label, r["calls"], _mb(r.get("traffic_bytes")),
                         _us(r.get("candidate")), _us(r.get("engine")), _us(r.get("compiled")),
                         _us(host.get("candidate"), spread=False), _us(host.get("engine"), spread=False),
                         "-" if r.get("speedup") is None else f"{r['speedup']:.3f}",
                         "-" if r.get("speedup_compiled") is None else f"{r['speedup_compiled']:.3f}",
                         _gbs(r.get("candidate_Bps")), _pct(r.get("candidate_frac_ceiling")),
                         _gbs(r.get("engine_Bps")), _pct(r.get("engine_frac_ceiling")),
                         _tflops(r.get("candidate_flops_per_s"), r.get("engine_flops_per_s")),
                         _scales(r), value_stats.describe(r.get("value_stats")), _result(r)])
            problems += [f"- {s['plugin']}:{s['slot']} [{label}]: {p}" for p in r["problems"]]
            flagged += [f"- {s['plugin']}:{s['slot']} [{label}]: {f}" for f in r.get("flags", [])]
        if s["status"] in (CheckStatus.RUNTIME_ERROR, CheckStatus.TIMEOUT):
            problems.append(f"- {s['plugin']}:{s['slot']}: {s['status']}: {s.get('error')} (log: {s.get('log')})")
    return rows, problems, flagged
