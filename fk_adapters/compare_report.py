"""``fk compare``'s outputs: the pull-request comment (markdown, verdict first, details collapsed) and the CSV of
its deltas, from what ``compare.compare`` returned."""
from __future__ import annotations

import csv
import io

from tabulate import tabulate

from fk_adapters import stats, time_attribution
from fk_adapters.compare import UNITS, interval_text
from fk_adapters.results import CompareResults, DeltaVerdict, KernelChange, ScenarioStatus, SlotEvidence

E, D, K = SlotEvidence, DeltaVerdict, KernelChange


def _num(x, fmt=".3f") -> str:
    if x is None:
        return "-"
    return format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _arrow(a, b, fmt=".3g") -> str:
    if a is None and b is None:
        return "-"
    return f"{_num(a, fmt)} → {_num(b, fmt)}"


def _speed(r: dict) -> float:
    """How good HEAD is on this row relative to BASE (> 1 better), for picking the worst row."""
    d = r["delta"]["ratio"] if r["delta"] else 1.0
    return d if r["higher_is_better"] else stats._div(1.0, d)


def _kernels_cell(sc: dict) -> str:
    ks = [k for k in sc["kernels"] if E.NOT_APPLICABLE not in (k["base_status"], k["head_status"]) or k["change"]]
    if not ks:
        return "-"
    b = sum(k["base_status"] == E.EXERCISED for k in ks)
    h = sum(k["head_status"] == E.EXERCISED for k in ks)
    cell = f"{b} → {h} exercised"
    if sc["stopped"]:
        cell += f"; **no longer running: {', '.join(sc['stopped'])}**"
    return cell


def _correct_cell(sc: dict) -> str:
    if sc["correct"]:
        return "ok"
    return "**FAIL**" + (" (a kernel no longer runs)" if sc["stopped"] and sc["head_status"] == ScenarioStatus.PASSED
                         else "")


def _status_cell(sc: dict) -> str:
    return sc["head_status"] if not sc["status_changed"] else f"{sc['base_status']} → **{sc['head_status']}**"


def _margin_text(cmp: CompareResults) -> str:
    floor = cmp.noise_floor
    f = (f"noise floor {floor['value']:.1%} from {floor['source']}" if floor else "no noise floor given")
    per = floor and floor.get("intervals")
    return (f"a delta counts only when its interval lies entirely beyond ±{cmp.margin:.1%} "
            f"(the larger of threshold {cmp.threshold:.1%} and {f})"
            + ("; a workload the A/A run measured: beyond the larger of the threshold and its own A/A reach "
               "(column margin)" if per else ""))


def to_markdown(cmp) -> str:
    """A pull-request comment: the verdict line first, a summary table, details collapsed. ``cmp``: ``compare``'s
    output (or its record, ``results.CompareResults``)."""
    cmp = cmp if isinstance(cmp, CompareResults) else CompareResults.from_dict(cmp)
    b, h = cmp.base, cmp.head
    lines = [cmp.verdict_line, "",
             f"BASE `{b['path']}` ({b['candidate']}, {b['engine']} {b['engine_version']}, {b['device']}) → "
             f"HEAD `{h['path']}` ({h['candidate']}, {h['engine']} {h['engine_version']}, {h['device']}); "
             f"delta = HEAD ratio / BASE ratio (each: candidate / stock engine), {cmp.conf:.0%} intervals; "
             + _margin_text(cmp) + "."]
    if cmp.problems:
        lines += [""] + [f"- {p}" for p in cmp.problems]
    lines += ["", _summary_table(cmp)]
    if cmp.only_base or cmp.only_head:
        lines += [""]
        if cmp.only_base:
            lines.append(f"- only in BASE (not compared): {', '.join(cmp.only_base)}")
        if cmp.only_head:
            lines.append(f"- only in HEAD (not compared): {', '.join(cmp.only_head)}")
    if cmp.perf:
        lines += _perf_details(cmp)
    lines += _correctness_details(cmp) + _kernel_details(cmp) + _time_details(cmp) + _method_details(cmp)
    return "\n".join(lines) + "\n"


def _time_details(cmp: CompareResults) -> list[str]:
    rows = [[sc["scenario"], t["family"], f"{t['base_us']:.0f} ({t['base_stock_us']:.0f})",
             f"{t['head_us']:.0f} ({t['head_stock_us']:.0f})", f"{t['delta_us']:+.0f}"]
            for sc in cmp.scenarios for t in sc.get("time") or [] if t["base_us"] or t["head_us"]]
    timed = [f"- {sc['scenario']}, {side}: " + time_attribution.timed_lines(t)[0]
             for sc in cmp.scenarios for side, t in (sc.get("timed") or {}).items()]
    if not rows:
        return []
    slots = [[sc["scenario"], t["slot"], _num(t["base_us"], ".0f"), _num(t["head_us"], ".0f"),
              _num(t["delta_us"], "+.0f")] for sc in cmp.scenarios for t in sc.get("slot_time") or []]
    per_slot = ["", "The plugin's own kernels (its declared kernel names) per slot, device µs in each profiled step.",
                "", tabulate(slots, headers=["scenario", "slot", "BASE µs", "HEAD µs", "Δ µs"], tablefmt="github")]
    return _details("Where the device time moved (the profiled step, GPU)", [
        "Candidate device µs per op family in BASE's and HEAD's profiled step (stock's in brackets).", "",
        tabulate(rows, headers=["scenario", "op family", "BASE µs (stock)", "HEAD µs (stock)", "Δ µs"],
                 tablefmt="github")] + (per_slot if slots else []) + ([""] + timed if timed else []))


def _summary_table(cmp: CompareResults) -> str:
    by_sc: dict = {}
    for r in cmp.perf:
        by_sc.setdefault(r["scenario"], []).append(r)
    table = []
    for sc in cmp.scenarios:
        rows = by_sc.get(sc["scenario"], [])
        counts = "/".join(str(sum(r["verdict"] == v for r in rows)) for v in (D.SLOWER, D.FASTER, D.NO_CHANGE))
        compared = [r for r in rows if r["delta"]]
        worst = min(compared, key=_speed) if compared else None
        table.append([sc["scenario"], _status_cell(sc), _correct_cell(sc), _kernels_cell(sc), counts if rows else "-",
                      f"{worst['kind']} {worst['workload']}: {interval_text(worst['delta'])}" if worst else "-"])
    return tabulate(table, headers=["scenario", "status (BASE → HEAD)", "correctness", "kernels",
                                    "perf slower/faster/unchanged", "worst delta [interval]"], tablefmt="github")


def _perf_details(cmp: CompareResults) -> list[str]:
    perf_table = [[r["scenario"], f"{r['kind']} {r['workload']}", UNITS.get(r["metric"], r["metric"]),
                   "higher" if r["higher_is_better"] else "lower", interval_text(r["base"]), interval_text(r["head"]),
                   interval_text(r["delta"]), r["delta"]["n"] if r["delta"] else "-",
                   r["delta"]["method"] if r["delta"] else "-", f"±{r['margin']:.1%}",
                   f"**{r['verdict']}**" if r["verdict"] != D.NO_CHANGE else r["verdict"]]
                  for r in cmp.perf]
    return _details(f"Performance: {len(cmp.perf)} comparisons", [
        tabulate(perf_table, headers=["scenario", "workload", "unit", "better", "BASE cand/base [interval]",
                                      "HEAD cand/base [interval]", "delta HEAD/BASE [interval]", "n", "interval",
                                      "margin", "verdict"], tablefmt="github"), "",
        "Intervals: `bootstrap` = percentile bootstrap of the per-repeat values; `range` = from the range of "
        "repeat-by-repeat ratios (the files hold no per-repeat values): a bound, not a confidence interval. "
        "Throughput: delta > 1 is faster; latency: delta < 1 is faster. Significance: " + _margin_text(cmp) + "."])


def _correctness_details(cmp: CompareResults) -> list[str]:
    corr = []
    for sc in cmp.scenarios:
        bf, hf = sc["base"], sc["head"]
        greedy = "-" if hf.get("requests") is None else f"{_greedy(bf)} → {_greedy(hf)} of {hf['requests']}"
        corr.append([sc["scenario"], sc["dtype"], _status_cell(sc),
                     _arrow(bf.get("max_abs_dlogprob"), hf.get("max_abs_dlogprob")) + (
                         f" (≤ {hf['limit_max_abs']:g})" if hf.get("limit_max_abs") is not None else ""),
                     greedy, _arrow(bf.get("output_rel_mean"), hf.get("output_rel_mean")),
                     _ref_ratio_cell(bf, hf),
                     "; ".join(sc["head_failures"])[:300] or "-"])
    return _details(f"Correctness: ok in {cmp.summary['correct']}/{cmp.summary['scenarios']} scenarios", [
        tabulate(corr, headers=["scenario", "dtype", "status (BASE → HEAD)", "max abs Δlogprob (limit)",
                                "greedy identical/near tie/parted", "outputs: mean abs Δ / mean abs baseline",
                                "err_c / err_b vs reference", "HEAD failures"], tablefmt="github")]
        + [f"- {sc['scenario']}: {n}" for sc in cmp.scenarios for n in sc["notes"]])


def _kernel_side(k: dict, side: str) -> str:
    hits = k[f"{side}_profiler_hits"]
    return (f"{k[f'{side}_status']} ({_num(k[f'{side}_calls'], 'd')} calls"
            + (f", {hits} profiler hits" if hits is not None else "") + ")")


def _kernel_details(cmp: CompareResults) -> list[str]:
    kern = [[sc["scenario"], k["slot"], k["head_kernel"] or "-", _kernel_side(k, "base"), _kernel_side(k, "head"),
             f"**{k['change']}**" if k["change"] in (K.STOPPED, K.REMOVED) else k["change"] or "-"]
            for sc in cmp.scenarios for k in sc["kernels"]]
    if not kern:
        return []
    return _details(f"Kernels: {cmp.summary['stopped_kernels']} no longer running in HEAD", [
        tabulate(kern, headers=["scenario", "slot", "HEAD kernel", "BASE", "HEAD", "change"], tablefmt="github")])


def _method_details(cmp: CompareResults) -> list[str]:
    method = [_input_line("BASE", cmp.base), _input_line("HEAD", cmp.head)]
    floor = cmp.noise_floor
    if floor and floor.get("intervals"):
        widest = max(floor["intervals"], key=lambda iv: iv["half_width"])
        method.append(f"- noise floor {floor['value']:.1%}: the largest max(|1 - lo|, |hi - 1|) over "
                      f"{len(floor['intervals'])} A/A ratio intervals, set by {widest['scenario']} {widest['kind']} "
                      f"{widest['workload']} {interval_text(widest)} ({widest['method']})")
    method += [f"- limitation: {x}" for x in cmp.limitations] + [f"- warning: {x}" for x in cmp.warnings]
    return _details("Method and inputs", method)


def _input_line(role: str, m: dict) -> str:
    return (f"- {role}: `{m['path']}`, {m['engine']} {m['engine_version']}, {m['device']}, mode {m['mode']}, "
            f"candidate {m['candidate']}, created {m['created']}" + (f", `{m['command']}`" if m.get("command") else ""))


def _greedy(f: dict) -> str:
    return "/".join(_num(f.get(k), "d") for k in ("identical", "near_ties", "parted"))


def _details(summary: str, body: list[str]) -> list[str]:
    return ["", f"<details><summary>{summary}</summary>", ""] + body + ["", "</details>"]


CSV_COLUMNS = ("scenario", "kind", "workload", "metric", "higher_is_better", "base", "base_lo", "base_hi", "head",
               "head_lo", "head_hi", "delta", "delta_lo", "delta_hi", "n", "interval", "margin", "verdict")


def to_csv(cmp) -> str:
    """One row per scenario x workload x metric (performance), plus one correctness row per scenario (kind
    "correctness", metric "status": BASE and HEAD status, verdict ok / FAIL)."""
    cmp = cmp.to_dict() if isinstance(cmp, CompareResults) else cmp
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for sc in cmp["scenarios"]:
        w.writerow({"scenario": sc["scenario"], "kind": "correctness", "workload": "", "metric": "status",
                    "base": sc["base_status"], "head": sc["head_status"],
                    "verdict": "ok" if sc["correct"] else "FAIL"})
    for r in cmp["perf"]:
        row = {"scenario": r["scenario"], "kind": r["kind"], "workload": r["workload"], "metric": r["metric"],
               "higher_is_better": r["higher_is_better"], "margin": r["margin"], "verdict": r["verdict"]}
        for side in ("base", "head", "delta"):
            iv = r[side]
            if iv:
                row.update({side: iv["ratio"], f"{side}_lo": iv["lo"], f"{side}_hi": iv["hi"]})
        if r["delta"]:
            row.update(n=r["delta"]["n"], interval=r["delta"]["method"])
        w.writerow(row)
    return buf.getvalue()


def _ref_ratio_cell(b: dict, h: dict) -> str:
    """err_c / err_b against the reference: of the outputs, else of the teacher-forced logprobs (mean)."""
    key = "output_ref_ratio" if "output_ref_ratio" in b or "output_ref_ratio" in h else "logprob_ref_ratio"
    return _arrow(b.get(key), h.get(key))
