"""PNG plots beside the markdown reports: per-scenario ratios with their intervals, per-slot op speedups.

- ``fk run`` results (one engine, or side by side with ``runs``): one row per scenario x engine x workload x
  primary metric (throughput: tokens/s, or items/s for models without tokens; latency: s), the candidate/baseline
  ratio as a point with its interval as an error bar. The interval is ``compare.side_interval``'s, drawn only for a
  run of ``variation.MIN_ROUNDS`` or more interleaved rounds (the t-interval over its rounds); a single pair of
  engine processes, or a single repeat, has none (hollow point). Throughput > 1 and latency < 1 are faster.
- ``fk compare`` output: the same chart of the deltas (HEAD ratio / BASE ratio), shaded by the comparison's margin.
- ``fk check`` results: one bar per (workload, plugin, slot), the call-weighted geomean speedup over its shapes
  (engine kernel time / plugin kernel time, > 1 = plugin faster), whiskers at the slowest and fastest shape.

Every axis is linear and centred on 1.0. matplotlib is imported inside the functions (object API with the Agg
canvas, never pyplot), so importing fk_adapters does not need it; ``write_plots`` is what a report calls:
it returns the PNG file names, to be linked from the markdown beside them as ``![...](name.png)``.
"""
from __future__ import annotations

import math
import os

from fk_adapters import compare, stats, variation
from fk_adapters.check.runner import weighted_geomean
from fk_adapters.gpu_share import disturbed
from fk_adapters.results import CheckStatus, Kind, RunResults, ScenarioStatus, as_record

RATIO_PNG, DELTA_PNG, OPS_PNG = "ratios.png", "deltas.png", "op-speedups.png"
DPI = 110
WIDTH_IN = 10.0
ROW_IN = 0.32  # figure height per row
THROUGHPUT_COLOR, LATENCY_COLOR, OTHER_COLOR = "tab:blue", "tab:orange", "tab:gray"
FASTER_COLOR, SLOWER_COLOR = "tab:green", "tab:red"
KIND_WORDS = {"throughput": "throughput", "latency": "latency"}


# ------------------------------------------------------------------------------------------------------------- rows

def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _interval_row(iv: dict, label: str, **extra) -> dict:
    """A plot row from an interval dict of ``compare.side_interval`` / ``delta_interval``: lo/hi None when the
    interval is only its point (n < 2)."""
    no_interval = iv.get("note") == stats.NO_INTERVAL
    return dict(extra, label=label, ratio=iv["ratio"], lo=None if no_interval else iv.get("lo"),
                hi=None if no_interval else iv.get("hi"), n=iv.get("n"), method=iv.get("method"),
                paired=bool(iv.get("paired") or (iv.get("paired_base") and iv.get("paired_head"))))


def _runs(results) -> list[RunResults]:
    """The per-engine runs in ``results`` (a run's record or content): itself, or the ``runs`` of a side-by-side
    file."""
    rec = as_record(results)
    return list(rec.runs) if rec.kind is Kind.RUNS else [rec]


def ratio_rows_from_results(results: dict, seed: int = 0) -> list[dict]:
    """Rows for ``ratio_plot`` from an ``fk run`` results file (one engine, or side by side with ``runs``).

    One row per scenario x engine x workload, on the workload's primary metric (``compare._ratio_dicts``), with
    the interval of ``compare.side_interval`` (bootstrap when per-repeat values exist, else pair_min..pair_max).
    Each row: label, ratio, lo, hi (None: no interval), n, method, scenario, engine, kind, workload, metric,
    higher_is_better, status. Workloads without a ratio are left out."""
    runs = _runs(results)
    several = len({r.engine for r in runs}) > 1
    rows = []
    for run in runs:
        engine = run.engine
        for sc in run.scenarios:
            status = sc.get("status")
            for kind, workload, metric, hib, r in compare._ratio_dicts(sc):
                iv = compare.side_interval(r, seed=seed)
                if iv is None:
                    continue
                if not variation.between_processes(run):  # repeats in one process per side: no interval to draw
                    iv = {"ratio": iv["ratio"], "n": iv.get("n"), "method": "single pair", "note": stats.NO_INTERVAL}
                parts = [sc["scenario"]] + ([engine] if several else [])
                label = f"{' · '.join(parts)} · {KIND_WORDS[kind]} {workload} ({compare.UNITS.get(metric, metric)})"
                if status and status != ScenarioStatus.PASSED:
                    label += f" [{status}]"
                if disturbed(sc):
                    label += " [DISTURBED: GPU shared]"
                rows.append(_interval_row(iv, label, scenario=sc["scenario"], engine=engine, kind=kind,
                                          workload=workload, metric=metric, higher_is_better=hib, status=status))
    return rows


def delta_rows_from_compare(cmp: dict) -> list[dict]:
    """Rows for ``ratio_plot`` from ``fk compare``'s output: the delta (HEAD ratio / BASE ratio) per scenario x
    workload with its interval; same keys as ``ratio_rows_from_results`` plus verdict."""
    engine = (cmp.get("head") or {}).get("engine")
    rows = []
    for r in cmp.get("perf") or []:
        if not r.get("delta"):
            continue
        label = (f"{r['scenario']} · {KIND_WORDS.get(r['kind'], r['kind'])} {r['workload']} "
                 f"({compare.UNITS.get(r['metric'], r['metric'])})")
        if r.get("verdict") and r["verdict"] != stats.NO_CHANGE:
            label += f" [{r['verdict']}]"
        rows.append(_interval_row(r["delta"], label, scenario=r["scenario"], engine=engine, kind=r["kind"],
                                  workload=r["workload"], metric=r["metric"],
                                  higher_is_better=r["higher_is_better"], verdict=r.get("verdict")))
    return rows


def op_rows_from_check(check_results: dict) -> list[dict]:
    """Rows for ``op_speedup_plot`` from ``fk check`` results: one per (workload, plugin, slot) that ran.

    speedup: the slot's call-weighted geomean over its shapes (``geomean_speedup``; recomputed with
    ``weighted_geomean`` where absent), None for a slot that is not PASSED (a wrong kernel's speed means
    nothing); lo / hi: the slowest and fastest shape's speedup. NOT_OFFERED slots (no kernel) are left out.
    Each row: label, speedup, lo, hi, points (every shape's speedup), shapes, calls, status, workload, plugin,
    slot."""
    slots = [s for s in check_results.get("slots") or [] if s.get("status") != CheckStatus.NOT_OFFERED]
    several = len({s.get("workload") for s in slots}) > 1
    rows = []
    for s in slots:
        shapes = s.get("shapes") or []
        per_shape = [r.get("speedup") for r in shapes if _finite(r.get("speedup")) and r["speedup"] > 0]
        passed = s.get("status") == CheckStatus.PASSED
        speedup = s.get("geomean_speedup") if passed else None
        if passed and speedup is None:
            speedup = weighted_geomean([(r.get("speedup"), r.get("calls", 1)) for r in shapes])
        label = " · ".join(([s["workload"]] if several else []) + [s.get("plugin", "?"), s.get("slot", "?")])
        if not passed:
            label += f" [{s.get('status')}]"
        rows.append({"label": label, "speedup": speedup, "points": per_shape if passed else [],
                     "lo": min(per_shape) if passed and per_shape else None,
                     "hi": max(per_shape) if passed and per_shape else None,
                     "shapes": len(shapes), "calls": s.get("calls"), "status": s.get("status"),
                     "workload": s.get("workload"), "plugin": s.get("plugin"), "slot": s.get("slot")})
    return rows


# ---------------------------------------------------------------------------------------------------------- drawing

def _figure(n_rows: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, max(2.6, 1.3 + ROW_IN * n_rows)), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    return fig, ax


def _x_range(values, floor: float | None) -> tuple[float, float]:
    """The x range: 1.0, every finite value and the floor band, at least 5% either side of 1.0, a 6% margin of
    the span on each side; linear, not forced symmetric (one-sided data keeps the room)."""
    xs = [v for v in values if _finite(v)] + ([1.0 - floor, 1.0 + floor] if floor else [])
    lo, hi = min(xs + [0.95]), max(xs + [1.05])
    pad = 0.06 * (hi - lo)
    return max(0.0, lo - pad), hi + pad


def _setup_axis(ax, n: int, labels: list[str], xrange: tuple[float, float], groups: list) -> tuple[float, float]:
    from matplotlib.ticker import MaxNLocator

    lo, hi = xrange
    ax.set_xlim(lo, hi)
    ax.set_ylim(n - 0.5, -0.5)  # first row on top
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels, fontsize=9)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=9, steps=[1, 2, 5, 10]))  # 1.0 is a tick
    ax.tick_params(axis="x", labelsize=9)
    ax.grid(axis="x", color="0.88", lw=0.8)
    ax.set_axisbelow(True)
    ax.axvline(1.0, color="black", lw=1.0, zorder=2)
    for i in range(1, n):  # a thin line where the scenario (or plugin) changes
        if groups[i] != groups[i - 1]:
            ax.axhline(i - 0.5, color="0.75", lw=0.6)
    return lo, hi


def _clip(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def _fmt(x) -> str:
    return "-" if x is None else ("inf" if x == math.inf else f"{x:.3f}")


def _note(ax, text: str) -> None:
    """A small-print line under the x label (in points, so it does not depend on the figure's size)."""
    if text:
        ax.annotate(text, xy=(0, 0), xycoords="axes fraction", xytext=(0, -42), textcoords="offset points",
                    va="top", ha="left", fontsize=8, color="0.3", wrap=True)


def _save(fig, path: str) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.15, metadata={"Software": None})
    return path


def ratio_plot(rows: list[dict], path: str, title: str, floor: float | None = None, note: str = "",
               xlabel: str = "candidate / baseline (1.0 = no change)", band_label: str = "noise floor") -> str:
    """Horizontal point chart: one row per dict {"label", "ratio", "lo", "hi"} (lo/hi None: point only, hollow),
    top to bottom; an error bar from lo to hi; a vertical line at 1.0; with ``floor`` a shaded band
    1 ± floor (the noise floor; its legend entry says ``band_label``). Colour by ``higher_is_better`` when a row has
    it (throughput blue, latency orange); rows with a ``scenario`` key are separated by thin lines between scenarios.
    The figure's height follows the number of rows; the value and interval are printed at the right. Writes a PNG,
    returns path."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if floor is not None and not 0 <= floor < 1:
        raise ValueError(f"noise floor {floor} is not a fraction in [0, 1)")
    n = max(1, len(rows))
    fig, ax = _figure(n)
    xr = _x_range([v for r in rows for v in (r.get("ratio"), r.get("lo"), r.get("hi"))], floor)
    groups = [r.get("scenario", r["label"]) for r in rows]
    xlo, xhi = _setup_axis(ax, n, [r["label"] for r in rows] or [""], xr, groups or [""])
    if floor:
        ax.axvspan(1.0 - floor, 1.0 + floor, color="0.6", alpha=0.22, lw=0, zorder=1)
    kinds = set()
    for y, r in enumerate(rows):
        hib = r.get("higher_is_better")
        kinds.add(hib)
        color = THROUGHPUT_COLOR if hib is True else LATENCY_COLOR if hib is False else OTHER_COLOR
        ratio, lo, hi = r.get("ratio"), r.get("lo"), r.get("hi")
        if ratio is None or (isinstance(ratio, float) and math.isnan(ratio)):
            ax.text(1.0, y, "  no ratio", va="center", fontsize=8, color="0.4")
            continue
        x = _clip(ratio, xlo, xhi)
        has_iv = lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi))
        if has_iv:
            lo_x, hi_x = _clip(lo, xlo, xhi), _clip(hi, xlo, xhi)
            ax.errorbar([x], [y], xerr=[[max(0.0, x - lo_x)], [max(0.0, hi_x - x)]], fmt="none", ecolor=color,
                        elinewidth=1.6, capsize=4, capthick=1.4, zorder=3)
        ax.plot([x], [y], marker="o", ms=7, color=color, mfc=color if has_iv else "white", mew=1.6, zorder=4,
                ls="none")
        text = f"{_fmt(ratio)} [{_fmt(lo)}, {_fmt(hi)}]" if has_iv else f"{_fmt(ratio)} (no interval)"
        ax.annotate(text, xy=(1.0, y), xycoords=ax.get_yaxis_transform(), xytext=(6, 0),
                    textcoords="offset points", va="center", fontsize=8, family="monospace")
    ax.set_xlabel(xlabel, fontsize=9)
    handles = []
    if True in kinds:
        handles.append(Line2D([], [], color=THROUGHPUT_COLOR, marker="o", ls="none", label="throughput (> 1 faster)"))
    if False in kinds:
        handles.append(Line2D([], [], color=LATENCY_COLOR, marker="o", ls="none", label="latency (< 1 faster)"))
    if any(r.get("lo") is None for r in rows if r.get("ratio") is not None):
        handles.append(Line2D([], [], color="0.3", marker="o", mfc="white", ls="none", label="no interval (n < 2)"))
    if floor:
        handles.append(Patch(color="0.6", alpha=0.35, label=f"{band_label} ±{floor:.1%}"))
    if handles:
        ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(handles), frameon=False,
                  fontsize=8, handletextpad=0.3, columnspacing=1.2, borderaxespad=0.2)
    ax.set_title(title, fontsize=11, loc="left", pad=22 if handles else 6)
    if not rows:
        ax.text(1.0, 0, "no ratios to plot", ha="center", va="center", fontsize=10, color="0.4")
    _note(ax, note)
    return _save(fig, path)


def op_speedup_plot(rows: list[dict], path: str, title: str, note: str = "") -> str:
    """Horizontal bars from 1.0: one per dict {"label", "speedup", "lo", "hi"} (speedup = engine kernel time /
    plugin kernel time; > 1 green: the plugin is faster, < 1 red), whiskers from lo to hi (the slowest and
    fastest shape), a faint tick per shape when a row has "points" (its shapes' speedups), a vertical line at 1.0.
    A row with speedup None (an INCORRECT or failed slot) gets no bar. Writes a PNG, returns path."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    n = max(1, len(rows))
    fig, ax = _figure(n)
    xr = _x_range([v for r in rows for v in (r.get("speedup"), r.get("lo"), r.get("hi"))], None)
    groups = [(r.get("workload"), r.get("plugin")) if "plugin" in r else r["label"] for r in rows]
    xlo, xhi = _setup_axis(ax, n, [r["label"] for r in rows] or [""], xr, groups or [""])
    for y, r in enumerate(rows):
        sp, lo, hi = r.get("speedup"), r.get("lo"), r.get("hi")
        if sp is None or not _finite(sp):
            why = r.get("status") or "no speedup"
            text = f"{why}: no speedup (wrong results)" if why == CheckStatus.INCORRECT else f"{why}: no speedup"
            ax.annotate(text if sp is None else _fmt(sp), xy=(1.0, y), xytext=(6, 0),
                        textcoords="offset points", va="center", fontsize=8, color="0.35")
            continue
        x = _clip(sp, xlo, xhi)
        ax.barh([y], [x - 1.0], left=1.0, height=0.55, color=FASTER_COLOR if sp >= 1.0 else SLOWER_COLOR,
                alpha=0.75, zorder=3)
        pts = [_clip(p, xlo, xhi) for p in r.get("points") or [] if _finite(p)]
        if pts:
            ax.plot(pts, [y] * len(pts), ls="none", marker="|", ms=9, mew=1.0, color="0.25", alpha=0.45, zorder=4)
        if lo is not None and hi is not None:
            lo_x, hi_x = _clip(lo, xlo, xhi), _clip(hi, xlo, xhi)
            ax.errorbar([x], [y], xerr=[[max(0.0, x - lo_x)], [max(0.0, hi_x - x)]], fmt="none", ecolor="0.15",
                        elinewidth=1.2, capsize=4, capthick=1.2, zorder=4)
        shapes = f", {r['shapes']} shapes" if r.get("shapes") else ""
        text = f"{_fmt(sp)} [{_fmt(lo)}, {_fmt(hi)}]{shapes}" if lo is not None else f"{_fmt(sp)}{shapes}"
        ax.annotate(text, xy=(1.0, y), xycoords=ax.get_yaxis_transform(), xytext=(6, 0),
                    textcoords="offset points", va="center", fontsize=8, family="monospace")
    ax.set_xlabel("speedup = engine kernel time / plugin kernel time (> 1: plugin faster)", fontsize=9)
    handles = [Patch(color=FASTER_COLOR, alpha=0.75, label="geomean > 1: plugin faster"),
               Patch(color=SLOWER_COLOR, alpha=0.75, label="< 1: slower"),
               Line2D([], [], color="0.15", marker="|", ms=10, ls="-", label="slowest .. fastest shape"),
               Line2D([], [], color="0.25", alpha=0.45, marker="|", ms=9, ls="none", label="one shape")]
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=4, frameon=False, fontsize=8,
              handletextpad=0.4, columnspacing=1.2, borderaxespad=0.2)
    ax.set_title(title, fontsize=11, loc="left", pad=22)
    if not rows:
        ax.text(1.0, 0, "no slot was timed", ha="center", va="center", fontsize=10, color="0.4")
    _note(ax, note)
    return _save(fig, path)


# ----------------------------------------------------------------------------------------------------------- report

PLOT_KINDS = {Kind.RUN: "run", Kind.RUNS: "run", Kind.CHECK: "check", Kind.COMPARE: "compare"}


def _kind_of(results) -> str:
    return PLOT_KINDS.get(as_record(results).kind, "run")


def _methods_note(rows: list[dict], conf: float = compare.CONF) -> str:
    methods = {r.get("method") for r in rows if r.get("lo") is not None}
    parts = []
    if "bootstrap" in methods:
        boot = [r for r in rows if r.get("method") == "bootstrap" and r.get("lo") is not None]
        what = ("the interleaved rounds, resampled in pairs" if all(r.get("paired") for r in boot) else
                "the per-repeat values" if not any(r.get("paired") for r in boot) else
                "the per-repeat values (interleaved rounds resampled in pairs)")
        parts.append(f"{conf:.0%} percentile bootstrap of {what}")
    if "range" in methods:
        parts.append("range of the repeat-by-repeat ratios (a bound, not a confidence interval)")
    return ("Intervals: " + "; ".join(parts) + ".") if parts else ""


def _run_title(results: dict) -> str:
    from fk_adapters.engine_integrity import describe

    runs = _runs(results)
    engines = ", ".join(describe(r.engine, r.engine_integrity.get(r.engine), r.engine_version)
                        for r in runs)  # "stock" only when verified
    first = runs[0] if runs else RunResults()
    cand = as_record(results).candidate or first.candidate
    device = f" ({first.device})" if first.device else ""
    if first.aa:
        return f"fk run A/A: {engines} vs. itself{device}"
    return f"fk run: candidate {cand} vs. {engines}{device}"


def write_plots(results: dict, out_dir: str, kind: str | None = None, floor: float | None = None) -> list[str]:
    """Write the PNG plots of ``results`` into ``out_dir``; return their file names, relative to ``out_dir``
    (link them from a markdown file there as ``![...](name)``).

    kind: "run" (an ``fk run`` results file, one engine or side by side) -> ``ratios.png``; "check" (``fk check``)
    -> ``op-speedups.png``; "compare" (``fk compare``'s output) -> ``deltas.png``; None: from ``results["kind"]``.
    floor: the noise floor to shade (run); compare shades its own margin; for an A/A run without one, the floor
    that run itself gives (``compare.noise_floor_from_aa``). Nothing to plot (no ratio, no slot): no file."""
    kind = kind or _kind_of(results)
    os.makedirs(out_dir, exist_ok=True)
    if kind == "run":
        rows = ratio_rows_from_results(results)
        if not rows:
            return []
        note = _methods_note(rows)
        runs = _runs(results)
        if floor is None and len(runs) == 1 and runs[0].aa:
            try:
                floor = compare.noise_floor_from_aa(runs[0])["value"]
                note += " Shaded: the noise floor this A/A run gives (largest reach of an interval from 1)."
            except compare.CompareError:
                floor = None
        if floor is not None and floor >= 1:
            floor = None
        ratio_plot(rows, os.path.join(out_dir, RATIO_PNG), _run_title(results), floor=floor, note=note.strip())
        return [RATIO_PNG]
    if kind == "compare":
        rows = delta_rows_from_compare(results)
        if not rows:
            return []
        b, h = results.get("base") or {}, results.get("head") or {}
        title = (f"fk compare: {h.get('candidate')} (HEAD) vs. {b.get('candidate')} (BASE), "
                 f"{h.get('engine')} {h.get('engine_version') or ''}".strip())
        note = _methods_note(rows, results.get("conf", compare.CONF))
        margin = results.get("margin")
        if margin:
            note += f" Shaded: the margin ±{margin:.1%}; a delta counts only when its whole interval lies beyond it."
        ratio_plot(rows, os.path.join(out_dir, DELTA_PNG), title, floor=margin if margin and margin < 1 else None,
                   note=note.strip(), xlabel="delta = HEAD ratio / BASE ratio (1.0 = no change)", band_label="margin")
        return [DELTA_PNG]
    if kind == "check":
        rows = op_rows_from_check(results)
        if not rows:
            return []
        title = (f"fk check: plugin kernels vs. {results.get('engine')} {results.get('engine_version') or ''} "
                 f"kernels ({results.get('device')})")
        op_speedup_plot(rows, os.path.join(out_dir, OPS_PNG), title.replace("  ", " "),
                        note="Per shape: median device times of interleaved timed calls; per slot: geomean over "
                             "shapes weighted by captured calls.")
        return [OPS_PNG]
    raise ValueError(f"unknown plot kind {kind!r} (run, check, compare)")


def markdown_images(names: list[str], alts: dict | None = None) -> list[str]:
    """Markdown lines linking the PNGs ``write_plots`` returned (from a markdown file in the same folder)."""
    default = {RATIO_PNG: "candidate / baseline ratios with intervals", DELTA_PNG: "HEAD / BASE deltas with intervals",
               OPS_PNG: "per-slot op speedups"}
    alts = dict(default, **(alts or {}))
    return [f"![{alts.get(n, n)}]({n})" for n in names]
