"""``fk compare BASE.json HEAD.json``: what changed between two ``fk run`` results files (e.g. main vs. a PR's kernel).

Inputs: two results files of ``fk run`` on the same engine (not side-by-side files of several engines: compare
``<out>/<engine>/results.json``). Either may be an A/A run (``fk run --aa``, the stock engine on both sides): as BASE
it stands for a main branch without the kernel (HEAD's delta is then its gain over the stock engine); BASE and HEAD
both A/A are an A/A pair, where a significant delta is noise beyond the floor. Scenarios present in both are
compared; those in one file only are listed. No shared scenario is an error.

Performance, per scenario and workload present in both, on the workload's primary metric (throughput: tokens/s, or
items/s for models without tokens, higher is better; latency: seconds, lower is better). Each file holds, per
workload, the candidate/baseline ratio of its own run; the compared quantity is

    delta = HEAD ratio / BASE ratio

(> 1 for throughput and < 1 for latency: HEAD's plugin gains more over the stock engine than BASE's). Its interval:

- ``bootstrap``: when both files carry the per-repeat values (``perf.<kind>.<workload>.<metric>.baseline.values`` and
  ``.candidate.values``), the percentile bootstrap of the ratio of ratios (``stats.bootstrap_ratio_of_ratios``; each
  file resampled on its own, paired within it when its ratio says ``"paired": true``, i.e. interleaved repeats);
- ``range``: otherwise, from what results files hold today (median/min/max/n per side and the range of the
  repeat-by-repeat ratios ``pair_min``..``pair_max``): [HEAD pair_min / BASE pair_max, HEAD pair_max / BASE pair_min].
  That is a bound on how far the repeats reach, not a confidence interval: wider, so fewer deltas are called
  significant. The output says which was used.

Verdict per delta (``stats.significant``) against margin = max(noise floor, threshold): "slower" (a regression)
only when the whole interval lies beyond 1 - margin (throughput) / 1 + margin (latency); "faster" the other way;
otherwise "no change". A delta with no interval (a single repeat in BASE or HEAD) is its point, a quotient of two
single-pair ratios each as far off as the margin allows: it must clear the margin compounded (``compounded``).
A delta is judged only when the variation between engine processes is accounted for: both files ran at least
``variation.MIN_ROUNDS`` interleaved rounds, or a noise floor is given; otherwise it is "not judged" and the
comparison INCOMPLETE. The noise floor comes from ``--noise-floor`` or an A/A results file
(``noise_floor_from_aa``: the largest distance from 1 reached by any of its ratio intervals, ``stats.noise_floor``);
without one, the threshold alone is the margin (said in the output). With an A/A file, a workload the A/A run
measured is held to that workload's own A/A reach (``margins``): a noisy batch-1 latency does not widen the margin
of a steady throughput.
"No change" is a conclusion only when it rules out a regression past ``max_margin`` (``--max-margin``, 10%): a delta
whose interval reaches past it (throughput below 1 - max_margin, latency above 1 + max_margin), or with no interval a
margin wider than it, is "too noisy" instead (``unresolved``), and the comparison INCOMPLETE: a floor of 27-161%
(an fk46 model's --smoke A/A) would otherwise PASS a kernel 50% slower.
A scenario whose BASE or HEAD timings ``fk run`` marked disturbed (``perf.disturbed``: another process used the GPU
during a timed engine run) gets no delta: its workloads are "not compared", with the reason in its notes; an A/A
file's disturbed scenarios are left out of its noise floor.

Correctness, per shared scenario: HEAD's status must be PASSED or NOT_APPLICABLE (an INCORRECT, NOT_EXERCISED,
LOAD_ERROR, RUNTIME_ERROR or TIMEOUT scenario in HEAD fails, even when BASE failed the same way), and no kernel may
stop running: a slot exercised in BASE and not exercised (or absent) in HEAD fails. Teacher-forced max |Δlogprob|,
greedy streams and output diffs are shown BASE -> HEAD.

Overall: FAIL when any delta is a regression or any shared scenario fails correctness; INCOMPLETE (also exit 1)
when a shared scenario measured something but got no delta at all (e.g. BASE ended RUNTIME_ERROR, or its timings
were disturbed) or a delta was not judged or too noisy: a check that could not be made is not a pass; otherwise
PASS.
"""
from __future__ import annotations

import math
import statistics

from fk_adapters import aggregates, host_cpu, stats, time_split, variation
from fk_adapters.gpu_share import disturbed
from fk_adapters.results import (
    DeltaVerdict,
    KernelChange,
    Kind,
    RunResults,
    SlotEvidence,
    Verdict,
    kind_of,
    stamp,
)
from fk_adapters.results.verdict import OK_STATUSES

E, D, K = SlotEvidence, DeltaVerdict, KernelChange
INCOMPLETE = Verdict.INCOMPLETE  # nothing wrong found, but a shared scenario's performance could not be compared
PRIMARY_THROUGHPUT = ("tokens_per_s", "items_per_s")
UNITS = {"tokens_per_s": "tokens/s", "items_per_s": "items/s", "latency_s": "s"}
N_BOOT = 2000
CONF = 0.95


def interval_text(iv: dict | None) -> str:
    """ratio [lo, hi], or ratio (n=1: no interval)."""
    if not iv or iv.get("ratio") is None:
        return "-"
    if iv.get("note") == stats.NO_INTERVAL:
        return f"{iv['ratio']:.3f} (n={iv.get('n')}: no interval)"
    return f"{iv['ratio']:.3f} [{iv['lo']:.3f}, {iv['hi']:.3f}]"


class CompareError(ValueError):
    """The inputs cannot be compared (not fk run results, different engines, nothing shared)."""


# ---------------------------------------------------------------------------------------------------------- inputs

def check_results(data, path: str, role: str) -> RunResults:
    """The record of ``data``; CompareError unless it is the results file of one ``fk run`` (of one engine)."""
    if isinstance(data, RunResults):
        return data
    if not isinstance(data, dict):
        raise CompareError(f"{role} {path} is not an fk run results file (not a JSON object)")
    kind = kind_of(data)
    if kind is Kind.CHECK:
        raise CompareError(f"{role} {path} holds fk check results; fk compare takes fk run results")
    if kind is Kind.RUNS:
        raise CompareError(f"{role} {path} is a side-by-side run of several engines; compare one engine's "
                           "results (<out>/<engine>/results.json)")
    if kind is not Kind.RUN:
        raise CompareError(f"{role} {path} is not an fk run results file (no 'engine'/'scenarios')")
    return RunResults.from_dict(data)


META = ("engine", "engine_version", "device", "host", "mode", "candidate", "plugins", "aa", "quick", "warmup_share",
        "workloads", "created", "command", "fk_version", "verdict", "cpu_binding")


def _meta(run: RunResults, path: str) -> dict:
    """The facts of a run that a comparison quotes (as the file holds them: None where it has none)."""
    data = run.to_dict()
    return dict({k: data.get(k) for k in META}, path=path)


def _ratio_dicts(row: dict):
    """(kind, workload, metric, higher_is_better, ratio dict) for the primary metric of each workload of a row."""
    perf = row.get("perf") or {}
    for name, metrics in (perf.get("throughput") or {}).items():
        for m in PRIMARY_THROUGHPUT:
            if m in metrics:
                yield "throughput", name, m, True, metrics[m]
                break
    for name, metrics in (perf.get("latency") or {}).items():
        if "latency_s" in metrics:
            yield "latency", name, "latency_s", False, metrics["latency_s"]


def _values(r: dict) -> tuple[list | None, list | None, bool]:
    b, c = (r.get(side) or {} for side in ("baseline", "candidate"))
    bv, cv = b.get("values"), c.get("values")
    paired = bool(r.get("paired", r.get("interleaved", False)))
    if not bv or not cv:
        return None, None, paired
    return list(bv), list(cv), paired and len(bv) == len(cv)


def _n(r: dict) -> int:
    return min((r.get("baseline") or {}).get("n", 0) or 0, (r.get("candidate") or {}).get("n", 0) or 0)


def _measured(r: dict) -> bool:
    """A ratio that can be compared: finite and positive, as is every value it holds (a side that timed 0 s or
    served nothing gives no ratio to call faster or slower)."""
    if not r or not stats.positive_finite(r.get("ratio")):
        return False
    return all(stats.positive_finite(v) for side in ("baseline", "candidate")
               for v in (r.get(side) or {}).get("values") or [])


def _round_ratios(bv: list | None, cv: list | None) -> list[float]:
    """Each round's candidate / baseline, over the rounds where both sides measured something."""
    return [c / b for b, c in zip(bv or [], cv or []) if stats.positive_finite(b) and stats.positive_finite(c)]


def side_interval(r: dict, seed: int = 0) -> dict | None:
    """One file's candidate/baseline ratio with its interval: bootstrap of the per-repeat values when the file has
    them, else the range of the repeat-by-repeat ratios. None when the file has no ratio there, or one that is not
    finite and positive."""
    if not _measured(r):
        return None
    bv, cv, paired = _values(r)
    if bv is not None and paired and len(bv) >= variation.MIN_ROUNDS:
        return stats.rounds_interval(bv, cv)
    if bv is not None and paired:  # rounds that timed nothing on a side left too few pairs: their range, no interval
        ratios = _round_ratios(bv, cv)
        return {"ratio": r["ratio"], "lo": min(ratios, default=r["ratio"]), "hi": max(ratios, default=r["ratio"]),
                "n": len(ratios), "method": "range", **({"note": stats.NO_INTERVAL} if len(ratios) < 2 else {})}
    if bv is not None:
        out = stats.bootstrap_ratio(bv, cv, paired, n_boot=N_BOOT, conf=CONF, seed=seed)
        out["method"] = "bootstrap"
        return out
    n = _n(r)
    out = {"ratio": r["ratio"], "lo": r.get("pair_min", r["ratio"]), "hi": r.get("pair_max", r["ratio"]), "n": n,
           "method": "range"}
    if n < 2:
        out["lo"] = out["hi"] = r["ratio"]
        out["note"] = stats.NO_INTERVAL
    return out


def shared_baselines(b_row: dict, h_row: dict) -> bool:
    """Whether BASE's and HEAD's rows of a scenario timed the same baseline engine processes, round by round (an
    `fk run --with-aa`'s A/A and its candidate): each round's baseline ran once, its log the same file in both."""
    logs = [[r.get("log") for r in ((row.get("rounds") or {}).get("runs") or [[]])[0]] for row in (b_row, h_row)]
    return len(logs[0]) > 1 and all(logs[0]) and logs[0] == logs[1]


def delta_interval(b: dict, h: dict, shared: bool = False, seed: int = 0) -> dict | None:
    """HEAD ratio / BASE ratio with its interval (bootstrap when both files have per-repeat values, else range;
    ``shared``: the same baseline processes, ``stats.rounds_delta_interval``)."""
    if not _measured(b) or not _measured(h):
        return None
    bb, bc, bp = _values(b)
    hb, hc, hp = _values(h)
    if bb is not None and hb is not None and bp and hp:
        return stats.rounds_delta_interval(bb, bc, hb, hc, shared)
    if bb is not None and hb is not None:
        out = stats.bootstrap_ratio_of_ratios(bb, bc, hb, hc, bp, hp, n_boot=N_BOOT, conf=CONF, seed=seed)
        out["method"] = "bootstrap"
        return out
    n = min(_n(b), _n(h))
    ratio = stats._div(h["ratio"], b["ratio"])
    out = {"ratio": ratio, "lo": ratio, "hi": ratio, "n": n, "method": "range"}
    if n < 2:
        out["note"] = stats.NO_INTERVAL
    else:
        out["lo"] = stats._div(h.get("pair_min", h["ratio"]), b.get("pair_max", b["ratio"]))
        out["hi"] = stats._div(h.get("pair_max", h["ratio"]), b.get("pair_min", b["ratio"]))
    return out


def noise_floor_from_aa(aa: dict, path: str = "") -> dict:
    """The noise floor of an A/A results file (``fk run --aa``): ``stats.noise_floor`` over the interval of every
    scenario x workload primary-metric ratio in it (``side_interval``), leaving out disturbed scenarios (another
    process used the GPU). Returns {"value", "source", "intervals"} (and "disturbed": the scenarios left out)."""
    aa = check_results(aa, path, "A/A")
    if not aa.aa:
        raise CompareError(f"--aa {path} is not an A/A run (fk run --aa): its candidate is "
                           f"{aa.candidate!r}")
    if not variation.between_processes(aa):
        raise CompareError(f"--aa {path}: {variation.why_not(aa)}: its spread is not the variation between engine "
                           "processes, so it gives no noise floor")
    intervals, skipped = [], []
    for row in aa.scenarios:
        if disturbed(row):  # another process on the GPU: not this machine's noise
            skipped.append(row["scenario"])
            continue
        for kind, name, metric, _, r in _ratio_dicts(row):
            iv = side_interval(r)
            if iv is not None and all(math.isfinite(iv[k]) for k in ("lo", "hi")):
                intervals.append(dict(iv, scenario=row["scenario"], kind=kind, workload=name, metric=metric,
                                      half_width=stats.half_width(iv), pair_reach=pair_reach(r)))
    if not intervals:
        raise CompareError(f"--aa {path} holds no performance ratio to derive a noise floor from"
                           + (f" (left out, another process used the GPU: {', '.join(skipped)})" if skipped else ""))
    out = {"value": stats.noise_floor(intervals), "source": f"A/A results {path}".strip(), "intervals": intervals,
           "pair_reach": max(iv["pair_reach"] for iv in intervals), "meta": _meta(aa, path)}
    if skipped:
        out["disturbed"] = skipped
    return out


# --------------------------------------------------------------------------------------------------------- compare

def _slots(row: dict) -> dict:
    return (row.get("evidence") or {}).get("slots") or {}


def _kernels(b_row: dict, h_row: dict) -> list[dict]:
    out = []
    bs, hs = _slots(b_row), _slots(h_row)
    for slot in list(dict.fromkeys([*bs, *hs])):
        b, h = bs.get(slot), hs.get(slot)
        b_ex = bool(b) and b.get("status") == E.EXERCISED
        h_ex = bool(h) and h.get("status") == E.EXERCISED
        change = ((K.STOPPED if h else K.REMOVED) if b_ex and not h_ex else K.STARTED if h_ex and not b_ex
                  else K.NONE)
        out.append({"slot": slot, "base_status": b.get("status") if b else E.ABSENT,
                    "head_status": h.get("status") if h else E.ABSENT,
                    "base_calls": b.get("calls") if b else None, "head_calls": h.get("calls") if h else None,
                    "base_profiler_hits": b.get("profiler_hits") if b and b.get("profiled") else None,
                    "head_profiler_hits": h.get("profiler_hits") if h and h.get("profiled") else None,
                    "head_kernel": h.get("kernel") if h else None, "change": change})
    return out


def _correctness_figures(row: dict) -> dict:
    c = row.get("correctness") or {}
    out: dict = {"kind": c.get("kind", "tokens" if "teacher_forced" in c else None)}
    tf, tok = c.get("teacher_forced"), c.get("tokens")
    if tf:
        out.update(max_abs_dlogprob=tf.get("max_abs"), mean_abs_dlogprob=tf.get("mean_abs"),
                   limit_max_abs=(c.get("thresholds") or {}).get("max_abs"))
    if tok:
        out.update(identical=tok.get("identical"), near_ties=tok.get("near_ties"),
                   parted=len(tok.get("unexplained") or []), requests=tok.get("requests"))
    worst = c.get("worst")
    if worst:
        out.update(output_rel_mean=worst.get("rel_mean"), output_min_cosine=worst.get("min_cosine"),
                   output_ref_ratio=worst.get("ratio_mean_abs"))
    ref = (c.get("reference") or {}).get("teacher_forced")
    if ref and tf:  # a token verdict re-judged against the float32 run
        out.update(logprob_ref_ratio=ref.get("ratio_mean_abs"), logprob_ref_ratio_max=ref.get("ratio_max_abs"),
                   fixed_passed=(c.get("fixed") or {}).get("passed"))
    return out


def _scenario(b_row: dict, h_row: dict) -> dict:
    name = h_row["scenario"]
    kernels = _kernels(b_row, h_row)
    stopped = [k["slot"] for k in kernels if k["change"] in (K.STOPPED, K.REMOVED)]
    problems = []
    if h_row.get("status") not in OK_STATUSES:
        why = "; ".join(h_row.get("failures") or [])
        same = " (as in BASE)" if b_row.get("status") == h_row.get("status") else ""
        problems.append(f"{name}: {b_row.get('status')} -> {h_row.get('status')}{same}" + (f": {why}" if why else ""))
    for k in kernels:
        was = f"BASE: {k['base_status']}, {k['base_calls']} calls"
        if k["change"] == K.STOPPED:
            problems.append(f"{name}: the kernel for {k['slot']} stopped running ({was}; HEAD: {k['head_status']}, "
                            f"{k['head_calls']} calls)")
        elif k["change"] == K.REMOVED:
            problems.append(f"{name}: HEAD installed no kernel for {k['slot']} ({was})")
    notes = []
    if b_row.get("dtype") != h_row.get("dtype"):
        notes.append(f"dtype differs: BASE {b_row.get('dtype')}, HEAD {h_row.get('dtype')}")
    return {"scenario": name, "dtype": h_row.get("dtype"), "base_status": b_row.get("status"),
            "head_status": h_row.get("status"), "status_changed": b_row.get("status") != h_row.get("status"),
            "correct": not problems, "base": _correctness_figures(b_row), "head": _correctness_figures(h_row),
            "head_failures": list(h_row.get("failures") or []), "kernels": kernels, "stopped": stopped,
            "problems": problems, "notes": notes,
            "time": time_split.moved(b_row.get("time_split"), h_row.get("time_split")),
            "slot_time": time_split.moved_slots(b_row.get("time_split"), h_row.get("time_split")),
            "timed": {side: (r.get("time_split") or {}).get("timed") for side, r in (("BASE", b_row), ("HEAD", h_row))
                      if (r.get("time_split") or {}).get("timed")}}


def pair_reach(r: dict) -> float:
    """How far from 1 the farthest single round of an A/A ratio lies (one process a side): what a run of one pair of
    processes may read when nothing changed. 0.0 where the ratio has no paired rounds."""
    bv, cv, paired = _values(r)
    return max((abs(x - 1.0) for x in _round_ratios(bv, cv) if paired), default=0.0)


def margins(floor: dict | None, threshold: float, single: bool = False) -> tuple[dict, float]:
    """The margin each delta must clear: max(threshold, the A/A half-width of that same scenario x workload x
    metric) where the A/A run measured it, else max(threshold, the floor's value: its widest interval). ``single``:
    BASE or HEAD ran fewer than ``variation.MIN_ROUNDS`` rounds, so its ratio is one pair of processes, which may lie
    as far off as the A/A's farthest single round (``pair_reach``), not only its interval over rounds."""
    def reach(d: dict) -> float:
        return d.get("pair_reach", 0.0) if single else 0.0

    default = max(threshold, floor["value"] if floor else 0.0, reach(floor or {}))
    by = {}
    for iv in (floor or {}).get("intervals") or []:
        by[(iv["scenario"], iv["kind"], iv["workload"], iv["metric"])] = max(threshold, iv["half_width"], reach(iv))
    return by, default


def compounded(margin: float) -> float:
    """The margin a delta with no interval (single repeats) must clear: it is the quotient of two single-pair ratios,
    each of which may be off by ``margin`` (the floor's reach for one pair of engine processes), so it may be off by
    up to (1 + margin) / (1 - margin) (a floor of 99% or more: nothing clears it)."""
    m = min(margin, 0.99)
    return (1 + m) / (1 - m) - 1


NOT_JUDGED = D.NOT_JUDGED
MAX_MARGIN = 0.10


def unresolved(delta: dict, margin: float, higher_is_better: bool, limit: float) -> bool:
    """Whether a delta judged "no change" leaves a regression past ``limit`` possible: its interval reaches past it,
    or, with no interval, the margin its point had to clear is wider than it."""
    if delta.get("note") == stats.NO_INTERVAL:
        return margin > limit
    return delta["lo"] < 1 - limit if higher_is_better else delta["hi"] > 1 + limit


def _perf(b_row: dict, h_row: dict, margin_of, judged: bool = True,
          limit: float = MAX_MARGIN) -> tuple[list[dict], list[str]]:
    rows, notes = [], []
    b_perf = {(k, w): (m, hib, r) for k, w, m, hib, r in _ratio_dicts(b_row)}
    h_perf = {(k, w): (m, hib, r) for k, w, m, hib, r in _ratio_dicts(h_row)}
    unclean = [f"{label} {why}" for label, r in (("BASE", b_row), ("HEAD", h_row)) for why in disturbed(r)]
    if unclean and any(k in b_perf for k in h_perf):
        notes.append("performance not compared: " + "; ".join(unclean))
    for key in [k for k in h_perf if k in b_perf]:
        kind, workload = key
        (bm, hib, br), (hm, _, hr) = b_perf[key], h_perf[key]
        if bm != hm:
            notes.append(f"{kind} {workload}: BASE measured {bm}, HEAD {hm}: not compared")
            continue
        delta = None if unclean else delta_interval(br, hr, shared_baselines(b_row, h_row))
        margin = margin_of(h_row["scenario"], kind, workload, hm)
        if delta and delta.get("note") == stats.NO_INTERVAL:
            margin = compounded(margin)
        row = {"scenario": h_row["scenario"], "kind": kind, "workload": workload, "metric": hm,
               "higher_is_better": hib, "base": side_interval(br), "head": side_interval(hr), "delta": delta,
               "margin": margin}
        if unclean:
            row["disturbed"] = unclean
        if delta is None:
            row["verdict"] = D.NOT_COMPARED
        elif not judged:
            row["verdict"] = NOT_JUDGED
        else:
            row["verdict"] = stats.significant(delta, margin, hib)
            if row["verdict"] == D.NO_CHANGE and unresolved(delta, margin, hib, limit):
                row["verdict"] = D.TOO_NOISY
                row["farthest"] = farthest_process(br, hr, {"BASE": b_row, "HEAD": h_row}, f"{kind} {workload}")
        if row["verdict"] == D.FASTER and _ran_no_kernel(h_row):
            row["verdict"], row["no_kernel"] = D.NO_CHANGE, True
        row["regression"] = row["verdict"] == D.SLOWER
        rows.append(row)
        notes += _inside_margin(row)
        if row.get("farthest"):
            notes.append(f"{kind} {workload} too noisy: the farthest engine process, {row['farthest']}")
    if any(r.get("no_kernel") for r in rows):
        notes.append("HEAD exercised no kernel of its plugin's own (the stock model, or only kernels that claim no "
                     "speed: the engine's own, a library's): a faster delta is not the plugin's, called no change")
    only = _timed_only_in(h_row, b_row)  # BASE's alone are not compared (``_compare_rows``)
    if only:
        notes.append("workloads only in HEAD: " + ", ".join(only))
    return rows, notes


def _inside_margin(row: dict) -> list[str]:
    """A note for a "no change" delta whose own interval (over rounds, or bootstrap) excludes 1: HEAD moved the same
    way in every resample, by less than the margin (the variation between engine processes) lets a delta count."""
    delta = row.get("delta") or {}
    if row["verdict"] != D.NO_CHANGE or delta.get("method", "range") == "range" or row.get("no_kernel"):
        return []
    if delta.get("note") == stats.NO_INTERVAL or not (delta["hi"] < 1 or delta["lo"] > 1):
        return []
    way = "slower" if (delta["hi"] < 1) == row["higher_is_better"] else "faster"
    row["inside_margin"] = way
    return [f"{row['kind']} {row['workload']}: HEAD {way} by its own interval, {interval_text(delta)}, inside the "
            f"±{row['margin']:.1%} margin: a delta smaller than the variation between engine processes, not counted"]


def _ran_no_kernel(row: dict) -> bool:
    """A candidate row whose evidence shows no kernel of the plugin's own exercised: none at all, or only the
    engine's own, a library's or unnamed ones on a device (an A/A row has no evidence)."""
    return "evidence" in row and not aggregates.ran_own_kernel(_slots(row))


def farthest_process(b: dict, h: dict, rows: dict | None = None, workload: str = "") -> str:
    """Which single engine process of BASE or HEAD lies farthest from the other rounds of its side (one value a
    process, 3 or more rounds), as "HEAD candidate round 1: 0.846x the median of its other rounds"; "" if none. With
    the results ``rows`` ({"BASE": row, "HEAD": row}), also how busy the host was during that process's runs."""
    best, where = (0.0, ""), None
    for label, r in (("BASE", b), ("HEAD", h)):
        for side in ("baseline", "candidate"):
            values = (r.get(side) or {}).get("values") or []
            if len(values) < 3 or not r.get("paired"):
                continue
            for i, v in enumerate(values):
                mid = statistics.median(values[:i] + values[i + 1:])
                off = v / mid if mid and v else 1.0
                if abs(math.log(off)) > best[0]:
                    best = (abs(math.log(off)), f"{label} {side} round {i + 1}: {off:.3f}x the median of its other "
                                                "rounds")
                    where = (label, side, i + 1)
    if where and rows and rows.get(where[0]):
        row = rows[where[0]]
        return best[1] + host_cpu.during(row, where[1], where[2], workload) + _pace_in(row, where[2])
    return best[1]


def _pace_in(row: dict, rnd: int) -> str:
    """The host pace of a round's profiled pair (``time_split.host_pace``), where its row kept one ("" if not)."""
    rounds = ((row.get("time_split") or {}).get("timed") or {}).get("rounds") or []
    pace = next((r.get("host_pace") for r in rounds if r.get("round") == rnd), None)
    return (f"; in that round the candidate's host took x{pace:.2f} the baseline's time for the same host work (the "
            "profiled runs)") if pace else ""


def _warnings(base: dict, head: dict, aa: dict | None) -> list[str]:
    """``base``, ``head``, ``aa``: the ``_meta`` of each run."""
    out = []
    for key in ("engine_version", "device", "host", "mode", "quick", "warmup_share", "workloads"):
        if base.get(key) != head.get(key):
            out.append(f"{key} differs: BASE {base.get(key)!r}, HEAD {head.get(key)!r}")
    if aa:
        for key in ("engine", "device", "host", "mode"):
            if aa.get(key) != head.get(key):
                out.append(f"the A/A run's {key} {aa.get(key)!r} is not HEAD's {head.get(key)!r}: "
                           "its noise floor may not be this machine's")
    for label, other in (("BASE", base), ("the A/A run", aa or {})):
        if other.get("cpu_binding") and head.get("cpu_binding") and other["cpu_binding"] != head["cpu_binding"]:
            out.append(f"{label} ran with FK_BIND_CPUS={other['cpu_binding']}, HEAD with "
                       f"FK_BIND_CPUS={head['cpu_binding']}: their engine processes ran on other host CPUs")
    return out


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def compare(base, head, threshold: float = 0.02, noise_floor: float | dict | None = None,
            base_path: str = "BASE", head_path: str = "HEAD", max_margin: float = MAX_MARGIN) -> dict:
    """Compare two ``fk run`` results (files' content or records; see the module docstring); the returned dict is
    the JSON output (``results.CompareResults``). ``noise_floor``: a relative half-width (e.g. 0.03), or
    ``noise_floor_from_aa``'s dict, or None (threshold only). Raises CompareError for inputs that cannot be
    compared."""
    base, head = check_results(base, base_path, "BASE"), check_results(head, head_path, "HEAD")
    if base.engine != head.engine:
        raise CompareError(f"BASE ran {base.engine} and HEAD ran {head.engine}: compare runs of one engine")
    if not 0 <= threshold < 1:
        raise CompareError(f"threshold {threshold} is not a fraction in [0, 1)")
    if not threshold <= max_margin < 1:
        raise CompareError(f"max margin {max_margin} is not a fraction in [threshold {threshold}, 1)")
    floor = _floor(noise_floor)
    rounds = variation.between_processes(base) and variation.between_processes(head)
    by_workload, margin = margins(floor, threshold, single=not rounds)
    judged = floor is not None or rounds
    scenarios, perf, uncompared = _compare_rows(base, head, lambda *key: by_workload.get(key, margin), judged,
                                                max_margin)
    methods = sorted({r["delta"]["method"] for r in perf if r["delta"]})
    b_meta, h_meta = _meta(base, base_path), _meta(head, head_path)
    limitations = _limitations(base, head, perf, methods) + _aa_notes(b_meta, h_meta, floor)
    if floor is None:
        limitations.append(f"no noise floor given (--noise-floor or --aa): deltas judged against the threshold "
                           f"({threshold:.1%}) alone")
    elif not rounds and floor.get("pair_reach"):
        limitations.append(f"BASE or HEAD ran fewer than {variation.MIN_ROUNDS} interleaved rounds: each delta is "
                           f"judged against the A/A's farthest single round ({floor['pair_reach']:.1%}), not only its "
                           "interval over rounds")
    summary = _summary(scenarios, perf)
    problems = [p for s in scenarios for p in s["problems"]]
    problems += [f"{r['scenario']}: {r['kind']} {r['workload']} slower: delta {interval_text(r['delta'])} beyond "
                 f"{'-' if r['higher_is_better'] else '+'}{r['margin']:.1%}" for r in perf if r["regression"]]
    verdict = Verdict.FAIL if problems else INCOMPLETE if uncompared else Verdict.PASS
    b_rows, h_rows = [r["scenario"] for r in base.scenarios], [r["scenario"] for r in head.scenarios]
    return {**stamp(Kind.COMPARE), "verdict": verdict, "verdict_line": _verdict_line(verdict, summary, uncompared),
            "summary": summary, "problems": problems, "uncompared": uncompared, "base": b_meta, "head": h_meta,
            "threshold": threshold, "max_margin": max_margin, "noise_floor": floor, "margin": margin, "conf": CONF,
            "methods": methods,
            "limitations": limitations, "warnings": _warnings(b_meta, h_meta, floor.get("meta") if floor else None),
            "only_base": [s for s in b_rows if s not in h_rows], "only_head": [s for s in h_rows if s not in b_rows],
            "scenarios": scenarios, "perf": perf}


def _floor(noise_floor: float | dict | None) -> dict | None:
    """The noise floor as ``noise_floor_from_aa`` gives it: from a given relative half-width, or as it is."""
    if isinstance(noise_floor, dict) or noise_floor is None:
        return noise_floor
    floor = {"value": float(noise_floor), "source": "given (--noise-floor)"}
    if not 0 <= floor["value"] < 1:
        raise CompareError(f"noise floor {floor['value']} is not a fraction in [0, 1)")
    return floor


def _compare_rows(base: RunResults, head: RunResults, margin_of, judged: bool,
                  limit: float = MAX_MARGIN) -> tuple[list, list, list]:
    """Per shared scenario: its correctness comparison, its performance rows, and why it got no delta (if so)."""
    b_rows = {r["scenario"]: r for r in base.scenarios}
    h_rows = {r["scenario"]: r for r in head.scenarios}
    shared = [s for s in h_rows if s in b_rows]
    if not shared:
        raise CompareError(f"BASE and HEAD share no scenario (BASE: {', '.join(b_rows) or 'none'}; "
                           f"HEAD: {', '.join(h_rows) or 'none'})")
    scenarios, perf, uncompared = [], [], []
    for name in shared:
        sc = _scenario(b_rows[name], h_rows[name])
        rows, notes = _perf(b_rows[name], h_rows[name], margin_of, judged, limit)
        sc["notes"] += notes
        scenarios.append(sc)
        perf += rows
        why = _uncompared(b_rows[name], h_rows[name], rows) or (
            "no delta judged: " + _unjudged(base, head) if any(r["verdict"] == NOT_JUDGED for r in rows) else "")
        if why:
            uncompared.append(f"{name}: no performance compared ({why})")
        dropped = _timed_only_in(b_rows[name], h_rows[name])
        if dropped:
            uncompared.append(f"{name}: HEAD did not time {', '.join(dropped)}, which BASE timed: not compared "
                              "(HEAD ran with --workloads, or failed to time them)")
        noisy = [f"{r['kind']} {r['workload']}" for r in rows if r["verdict"] == D.TOO_NOISY]
        if noisy:
            uncompared.append(f"{name}: {_plural(len(noisy), 'workload')} too noisy to rule out a regression past "
                              f"{limit:.0%} ({', '.join(noisy)}): more interleaved rounds (`fk run --workloads` "
                              "times only these) or larger workloads")
    return scenarios, perf, uncompared


def _limitations(base: RunResults, head: RunResults, perf: list[dict], methods: list[str]) -> list[str]:
    """What limits the deltas' intervals: range bounds, single repeats, unpaired repeats, disturbed timings."""
    out = []
    if "range" in methods:
        out.append("per-repeat values are missing from " + (
            "both files" if not any(_has_values(d) for d in (base, head)) else "one file")
            + ": a delta's interval is the range bound [HEAD pair_min / BASE pair_max, HEAD pair_max / BASE pair_min] "
            "from the repeat-by-repeat ratio ranges, not a bootstrap confidence interval; it is wider, so fewer "
            "deltas are called significant")
    if any(r["delta"] and r["delta"].get("note") == stats.NO_INTERVAL for r in perf):
        out.append("some workloads have a single repeat (n<2): no interval; their point estimate, a quotient of two "
                   "single-pair ratios, must clear the margin compounded over both, (1 + m) / (1 - m) - 1 (the margin "
                   "column shows it)")
    if any(r["delta"] and r["delta"]["method"] == "bootstrap"
           and not (r["delta"]["paired_base"] and r["delta"]["paired_head"]) for r in perf):
        out.append("some repeats were not interleaved (no \"paired\" flag): their sides were resampled "
                   "independently")
    if any(r.get("disturbed") for r in perf):
        out.append("some workloads were not compared: another process used the GPU during their timed "
                   "runs in BASE or HEAD (scenario notes say which); run them again on an idle GPU")
    if head.workloads:
        out.append(f"HEAD timed only the workloads --workloads chose ({', '.join(head.workloads)}): this comparison "
                   "says nothing of the others")
    return out


def _summary(scenarios: list[dict], perf: list[dict]) -> dict:
    return {
        "regressions": sum(r["verdict"] == D.SLOWER for r in perf),
        "faster": sum(r["verdict"] == D.FASTER for r in perf),
        "unchanged": sum(r["verdict"] == D.NO_CHANGE for r in perf),
        "not_compared": sum(r["verdict"] == D.NOT_COMPARED for r in perf),
        "not_judged": sum(r["verdict"] == D.NOT_JUDGED for r in perf),
        "too_noisy": sum(r["verdict"] == D.TOO_NOISY for r in perf),
        "correct": sum(s["correct"] for s in scenarios), "scenarios": len(scenarios),
        "stopped_kernels": sum(len(s["stopped"]) for s in scenarios),
    }


def _verdict_line(verdict: Verdict, summary: dict, uncompared: list[str]) -> str:
    return (f"**{verdict}**: {_plural(summary['regressions'], 'regression')}, {summary['faster']} faster, "
            f"{summary['unchanged']} unchanged" + (f", {summary['not_compared']} not compared"
                                                    if summary["not_compared"] else "")
            + (f", {summary['too_noisy']} too noisy" if summary.get("too_noisy") else "")
            + f"; correctness ok in {summary['correct']}/{summary['scenarios']} scenarios"
            + (f"; {_plural(summary['stopped_kernels'], 'kernel')} no longer running"
               if summary["stopped_kernels"] else "")
            + "".join(f"; {u}" for u in uncompared))


def _unjudged(base: RunResults, head: RunResults) -> str:
    single = [label for label, d in (("BASE", base), ("HEAD", head)) if not variation.between_processes(d)]
    return (f"{' and '.join(single)} ran fewer than {variation.MIN_ROUNDS} interleaved rounds and no noise floor was "
            "given (--aa or --noise-floor): the variation between engine processes is not accounted for")


def _aa_notes(base: dict, head: dict, floor: dict | None) -> list[str]:
    """What an A/A run as BASE or HEAD (or as BASE and the noise floor at once) means for the deltas; ``base`` and
    ``head``: the ``_meta`` of each run."""
    out = []
    if base.get("aa") and head.get("aa"):
        out.append("BASE and HEAD are both A/A runs (an A/A pair: nothing changed between them): a significant "
                   "delta here is noise beyond the floor")
    elif base.get("aa"):
        out.append("BASE is an A/A run (the stock engine on both sides, no kernel): each delta is HEAD's "
                   "candidate/stock ratio over BASE's stock/stock ratio")
    elif head.get("aa"):
        out.append("HEAD is an A/A run: it runs none of BASE's kernels")
    meta = (floor or {}).get("meta") or {}
    if base.get("aa") and meta and all(meta.get(k) == base.get(k) for k in ("created", "command", "host")):
        out.append("the noise floor comes from BASE itself: BASE's spread counts in both the floor and each delta")
    return out


def _timed_only_in(row: dict, other: dict) -> list[str]:
    """The workloads ``row`` timed and ``other`` did not ('KIND NAME'): BASE's alone would hide a regression."""
    timed = {(kind, w) for kind, w, *_ in _ratio_dicts(other)}
    return [f"{kind} {w}" for kind, w, *_ in _ratio_dicts(row) if (kind, w) not in timed]


def _uncompared(b_row: dict, h_row: dict, rows: list[dict]) -> str:
    """Why a shared scenario that measured something got no delta at all ('' when some delta was computed)."""
    measured = {label: any(True for _ in _ratio_dicts(r)) for label, r in (("BASE", b_row), ("HEAD", h_row))}
    if any(r["delta"] for r in rows) or not any(measured.values()):
        return ""
    empty = [f"{label} {r.get('status', '?')}: no measurements" for label, r in (("BASE", b_row), ("HEAD", h_row))
             if not measured[label]]
    return "; ".join(empty) or "its workloads could not be compared (scenario notes say why)"


def _has_values(run: RunResults) -> bool:
    return any(_values(r)[0] is not None for row in run.scenarios for *_, r in _ratio_dicts(row))
