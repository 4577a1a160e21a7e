"""Render ``fk run`` results (one engine, or side by side) as a markdown report fit for a pull request."""
from __future__ import annotations

import json

from tabulate import tabulate

from fk_adapters import metrics, variation, wall_time
from fk_adapters.engine_integrity import describe
from fk_adapters.gpu_share import disturbed, gpu_models
from fk_adapters.results import Kind, RunResults, ScenarioStatus as S, SideBySide, SlotEvidence as E, as_record

BEFORE_FAILURE = " (figures measured before the failure)"


def _f(x, fmt=".3g") -> str:
    return "-" if x is None else format(x, fmt)


def _ratio(r: dict) -> str:
    if not r or r.get("ratio") is None:
        return "-"
    return f"{r['ratio']:.3f} [{r['pair_min']:.3f}, {r['pair_max']:.3f}]"


def _interval(r: dict, results: RunResults) -> str:
    """The ratio's 95% t-interval over interleaved rounds (``variation.interval``), or why there is none."""
    if not r:
        return "-"
    if not variation.between_processes(results):
        return "none (single pair)" if variation.rounds(results) == 1 else "none (too few rounds)"
    iv = variation.interval(r, results)
    if not iv:
        return "-"
    if iv.get("note"):
        return iv["note"]
    return f"{iv['ratio']:.3f} [{iv['lo']:.3f}, {iv['hi']:.3f}]"


def _ages(rows: list[dict]) -> str:
    """How long before this run its reused baselines were made (on this same machine hold)."""
    ages = [r["baseline"]["reused_age_s"] for r in rows if r.get("baseline", {}).get("reused_age_s") is not None]
    if not ages:
        return ""
    span = f"{min(ages) / 60:.0f}" + (f"-{max(ages) / 60:.0f}" if max(ages) - min(ages) >= 60 else "")
    return f" (made {span} min earlier on this machine hold)"


def _spread(s: dict) -> str:
    if not s or not s.get("n"):
        return "-"
    return f"{s['median']:.4g} ±{100 * s['rel_spread'] / 2:.1f}% (n={s['n']})"


def _quick(quick) -> str:
    if not quick:
        return ""
    return ", quick" if quick is True else f", 1/{quick} of the throughput requests"


def _warmup(share: float) -> str:
    return "" if share >= 1 else f", each throughput warm-up pass over the first {share:.0%} of its requests"


def _workloads(chosen: list[str]) -> str:
    return "" if not chosen else (f", timed only the workloads --workloads chose ({', '.join(chosen)}): no "
                                  "FastKernels score")


def _tokens_cell(tok: dict) -> str:
    if not tok:
        return "-"
    if "unexplained" not in tok:  # results written before near ties were told apart
        return f"{tok['identical']} identical of {tok['requests']}"
    return f"{tok['identical']} / {tok['near_ties']} / {len(tok['unexplained'])} of {tok['requests']}"


def _entered(classes: list[str]) -> str:
    return ", ".join(classes) if len(classes) <= 2 else f"{classes[0]} +{len(classes) - 1} more classes"


def _perf_rows(row: dict, results: RunResults) -> list[list[str]]:
    out = []
    perf = row.get("perf", {})
    scenario = row["scenario"] + (" **(disturbed)**" if disturbed(row) else "")
    for name, r in perf.get("throughput", {}).items():
        key, unit = ("items_per_s", "items/s") if "items_per_s" in r else ("tokens_per_s", "tokens/s")  # no tokens
        t = r[key]
        out.append([scenario, f"throughput {name}", unit, _spread(t.get("baseline")),
                    _spread(t.get("candidate")), _ratio(t), _interval(t, results),
                    _ratio(r["output_tokens_per_s"]) if "output_tokens_per_s" in r else ""])
    for name, r in perf.get("latency", {}).items():
        t = r["latency_s"]
        out.append([scenario, f"latency {name}", "s", _spread(t.get("baseline")), _spread(t.get("candidate")),
                    _ratio(t), _interval(t, results), ""])
    return out


def render(results) -> str:
    """The markdown report of a results file's content or record: an ``fk run`` (one engine, or side by side) or
    an ``fk check``."""
    rec = as_record(results)
    if rec.kind is Kind.CHECK:
        from fk_adapters.check.report import render_check

        return render_check(rec)
    if rec.kind is Kind.RUNS:
        return render_side_by_side(rec)
    if rec.kind is not Kind.RUN:
        raise ValueError(f"fk report renders fk run and fk check results, not {rec.kind.value} results")
    return render_run(rec)


def render_run(run: RunResults) -> str:
    rows = run.scenarios
    lines = _header(run) + ["", "## Scenarios", ""] + _correctness_lines(run) + _notes_and_failures(rows)
    if not run.aa:
        lines += _evidence_lines(run)
    perf_rows = [p for r in rows for p in _perf_rows(r, run)]
    if perf_rows:
        lines += _perf_lines(run, perf_rows)
    elif run.correctness_only:
        lines += ["", "## Performance", "", "Not measured: `--correctness-only` (no throughput or latency phases)."]
    lines += _time_split_lines(rows)
    lines += wall_time.markdown(rows, run.wall_s)
    if run.noise_floor:
        lines += _noise_floor_lines(run.noise_floor)
    if perf_rows and not run.aa:
        from fk_adapters import aggregates

        lines += ["", aggregates.markdown(aggregates.summarize(run.to_dict())).rstrip()]
    return "\n".join(lines) + "\n"


def _header(run: RunResults) -> list[str]:
    rows = run.scenarios
    passed = sum(r["status"] == S.PASSED for r in rows)
    stock = sum(r["status"] == S.NOT_APPLICABLE for r in rows)
    lines = [f"# fk run: {run.candidate} on {run.engine} {run.engine_version}", "",
             f"**{run.verdict or '?'}**: {passed}/{len(rows)} scenarios passed"
             + (f", {stock} not applicable (no layer routes to a selected slot: the stock model ran)" if stock else "")
             + (f"; {'; '.join(run.problems)}" if run.problems else ""), "",
             f"- device: {run.device}{gpu_models(run.gpus)}, mode: {run.mode_detail or run.mode}, fk {run.fk_version}, "
             f"created {run.created}{_quick(run.quick)}{_warmup(run.warmup_share)}{_workloads(run.workloads)}",
             f"- baseline: {describe(run.engine, run.engine_integrity.get(run.engine))} (no fk plugin)"
             + (f", runs reused from `{run.baseline_from}`{_ages(rows)}" if run.baseline_from else "")
             + f"; candidate: {run.candidate}"]
    runtimes = {json.dumps(r["candidate"]["runtime"], sort_keys=True) for r in rows if r["candidate"].get("runtime")}
    if runtimes:
        lines.append(f"- engine runtime (candidate, as the engine resolved it): {'; '.join(sorted(runtimes))}")
    if run.tuning_env:
        lines.append("- tuning environment (both sides' engine processes): "
                     + ", ".join(f"`{k}={v}`" for k, v in run.tuning_env.items()))
    if run.with_aa:
        floor = (run.with_aa.get("noise_floor") or {}).get("value")
        lines.append("- with the A/A of the same rounds (a second stock process in each): noise floor "
                     + (f"±{floor * 100:.2f}%" if floor is not None else "not measured")
                     + f" (`{run.with_aa['results']}`, {run.with_aa.get('verdict', '?')}); the candidate's deltas "
                     "judged against it in `compare-aa/compare.md`")
    if run.command:
        lines.append(f"- command: `{run.command}`")
    return lines


def _correctness_lines(run: RunResults) -> list[str]:
    """The token table (and its pass rules), then the output-diff table of models without tokens."""
    out_rows = [r for r in run.scenarios if _output_row(r)]
    tok_rows = [r for r in run.scenarios if not _output_row(r)]
    show_tokens = bool(tok_rows) or not out_rows
    lines = _token_table(tok_rows) if show_tokens else []
    if run.thresholds and show_tokens:
        lines += ["", "Pass: every greedy stream identical or parting at a near tie (each side's token in the "
                  "other's top 5 there), and teacher-forced |Δlogprob| on identical sequences within "
                  + "; ".join(f"{d}: max {t['max_abs']:g}, mean {t['mean_abs']:g}" for d, t in run.thresholds.items())
                  + "."]
    refs = [r["correctness"]["reference"] for r in tok_rows if r.get("correctness", {}).get("reference")]
    if refs:
        rule = refs[0]["rule"]
        lines += ["", "float16/bfloat16 runs that fail those get a float32 run of the stock engine (same job) as the "
                  "reference: err = |teacher-forced logprob - float32's|; pass when the candidate's mean err is at "
                  f"most {rule['ratio_mean_abs']:g} x the baseline's, its max err at most {rule['ratio_max_abs']:g} x "
                  + (f"the baseline's, its median err at most {rule['ratio_median_abs']:g} x "
                     if "ratio_median_abs" in rule else "") +
                  f"the baseline's (each + {rule['slack']:g}), and its greedy streams part from float32's outside a "
                  f"near tie in at most max({rule['min_partings']}, {rule['extra_partings']:g} x requests) more "
                  "requests than the baseline's."]
    if out_rows:
        lines += _output_table(out_rows, run, show_tokens)
    return lines


def _token_table(tok_rows: list[dict]) -> list[str]:
    ref_col = any("fixed" in r.get("correctness", {}) for r in tok_rows)  # a float32 run was tried
    table = []
    for r in tok_rows:
        c = r.get("correctness", {})
        tok, tf = c.get("tokens", {}), c.get("teacher_forced", {})
        table.append([r["scenario"], _status_cell(r), r["dtype"], _tokens_cell(tok),
                      _f(tf.get("max_abs")), _f(tf.get("mean_abs"))] + ([_token_ref_cell(c)] if ref_col else [])
                     + [_f(r["baseline"].get("startup_s"), ".1f"), _f(r["candidate"].get("startup_s"), ".1f")])
    return [tabulate(table, headers=["scenario", "status", "dtype", "greedy streams: identical / near tie / parted",
                                     "max abs Δlogprob", "mean abs Δlogprob"]
                     + (["vs fp32 run: err_c / err_b mean (max), parted c/b"] if ref_col else [])
                     + ["baseline start s", "candidate start s"], tablefmt="github")]


def _notes_and_failures(rows: list[dict]) -> list[str]:
    lines = []
    notes = [(r["scenario"], n) for r in rows for n in r.get("notes", [])]
    if notes:
        lines += ["", "### Notes", ""] + [f"- **{s}**: {n}" for s, n in notes]
    failures = [(r["scenario"], f) for r in rows for f in r.get("failures", [])]
    if failures:
        lines += ["", "### Failures", ""] + [f"- **{s}**: {f}" for s, f in failures] + _kept_lines(rows)
        for r in rows:
            for side in ("baseline", "candidate", "reference"):
                tail = r.get(side, {}).get("log_tail")
                if tail:
                    lines += ["", f"<details><summary>{r['scenario']} {side} log tail</summary>", "", "```",
                              tail[-1500:], "```", "</details>"]
    return lines


def _rank_lines(rows: list[dict]) -> list[str]:
    """Under tensor parallelism, each slot's calls (and profiler hits) on each rank: a slot is proven on all or none."""
    table = []
    for r in rows:
        for slot, e in r.get("evidence", {}).get("slots", {}).items():
            for rank, ev in sorted((e.get("ranks") or {}).items(), key=lambda kv: int(kv[0])):
                table.append([r["scenario"], slot, rank, _f(ev.get("layers"), "d") if ev["reported"] else "no evidence",
                              _f(ev.get("calls"), "d"), _f(ev.get("profiler_hits"), "d")])
    if not table:
        return []
    return ["", "Per tensor-parallel rank (a slot is exercised only where every rank proves it):", "",
            tabulate(table, headers=["scenario", "slot", "rank", "layers", "calls", "profiler hits"],
                     tablefmt="github")]


def _evidence_lines(run: RunResults) -> list[str]:
    """The proof each plugin kernel ran: per scenario and slot, the processes that loaded them, the coverage."""
    rows = run.scenarios
    lines = ["", "## Proof the plugin kernels ran", ""]
    ev_rows = []
    for r in rows:
        as_of = r.get("evidence", {}).get("as_of")
        for slot, e in r.get("evidence", {}).get("slots", {}).items():
            ev_rows.append([r["scenario"], slot, e["plugin"], e["kernel"], _entered(e["entered"]), e["layers"],
                            e["calls"], e["profiler_hits"] if e["profiled"] else "-",
                            e["status"] + (f" (as of {as_of})" if as_of and e["status"] != E.NOT_JUDGED else ""),
                            e["proof"]])
    lines.append(tabulate(ev_rows, headers=["scenario", "slot", "plugin", "kernel", "entered via", "layers",
                                            "calls", "profiler hits", "status", "proof"], tablefmt="github")
                 if ev_rows else _no_kernel_line(rows))
    lines += _rank_lines(rows)
    lines += ["", "Processes that loaded the plugins (pid, role; 'forked' when the process inherited them):"]
    lines += [_processes_line(r) for r in rows]
    if run.coverage:
        lines += ["", tabulate([[s, c["plugin"], ", ".join(c["exercised_in"]) or "-",
                                 ", ".join(c["not_exercised_in"]) or "-", ", ".join(c["n/a_in"]) or "-"]
                                for s, c in sorted(run.coverage.items())],
                               headers=["slot", "plugin", "exercised in", "NOT exercised in", "no layer in"],
                               tablefmt="github")]
    return lines


def _perf_lines(run: RunResults, perf_rows: list[list[str]]) -> list[str]:
    rounds = variation.rounds(run)
    cut = f" (of {run.interleave} planned: --time-budget)" if rounds < (run.interleave or 1) else ""
    how = (f"{rounds} interleaved rounds{cut} (A B, B A, ...: each a fresh engine process); one value per "
           "process (the median of its repeats), medians over rounds" if rounds > 1 else
           "Medians over repeats in one engine process per side")
    lines = ["", "## Performance (candidate / baseline)", "",
             f"{how}; ± is half the min-max range. Ratio: candidate median / baseline median [range of "
             f"{'round' if rounds > 1 else 'repeat'}-by-{'round' if rounds > 1 else 'repeat'} ratios]; 95% CI: "
             "geometric mean of the round-by-round ratios with its t-interval, given only over "
             f"{variation.MIN_ROUNDS} or more interleaved rounds (the variation between engine processes). "
             "Throughput: >1 is faster; latency: <1 is faster.", ""]
    if variation.why_not(run):
        lines += [f"**No interval, no significance: {variation.why_not(run)}.**", ""]
    shared = [r["scenario"] for r in run.scenarios if disturbed(r)]
    if shared:
        lines += [f"**Disturbed timings: another process used the GPU during timed engine runs of "
                  f"{', '.join(shared)}. Their ratios"
                  + (" (left out of the noise floor)" if run.aa else " (and the aggregates below)")
                  + " are not comparable: run them again on an idle GPU.** Correctness and kernel evidence "
                  "are unaffected; the notes say which runs and which processes.", ""]
    return lines + [tabulate(perf_rows, headers=["scenario", "workload", "unit", "baseline", "candidate",
                                                 "ratio (total) [range]", "95% CI", "ratio (output tokens/s)"],
                             tablefmt="github")]


def _time_split_lines(rows: list[dict]) -> list[str]:
    split = [(r["scenario"], r["time_split"]) for r in rows if r.get("time_split")]
    if not split:
        return []
    from fk_adapters import time_attribution, time_split

    lines = ["", "## Where the device time went (the profiled step)", "",
             "One profiled run of each side (round 1's, in a run of interleaved rounds; the same requests, after the "
             "timed phases; CUDA kernels sorted into op families by `fk_adapters/op_families.py`): device time only "
             "(not the host's).", ""]
    perf = {r["scenario"]: r.get("perf") for r in rows}
    for name, s in split:
        lines += time_split.markdown(name, s)
        lines += time_attribution.timed_lines(s["timed"]) if s.get("timed") else _step_against_timed(s, perf.get(name))
    return lines


def _step_against_timed(s: dict, perf: dict | None) -> list[str]:
    """The profiled step's speedup (its device time plus the device's wait on the host) beside the timed workloads'
    ones: a step whose speedup lies outside theirs does not explain their delta."""
    from fk_adapters import time_split
    from fk_adapters.aggregates import speedups

    step = time_split.step_speedup(s)
    if step is None:
        return []
    timed = [v for kind in speedups(perf).values() for v in kind.values()]
    if not timed:
        return []
    lo, hi = min(timed), max(timed)
    where = "inside" if lo <= step <= hi else "outside"
    return [f"The profiled step's speedup (stock / candidate time, its kernels' and the waits between them) is "
            f"{step:.3f}; the timed workloads' speedups span {lo:.3f}-{hi:.3f}: the step lies {where} them"
            + ("." if where == "inside" else ", so its attribution does not explain the timed delta."), ""]


def _noise_floor_lines(nf: dict) -> list[str]:
    w = nf["widest"]
    return ["", "## Noise floor of this machine (A/A)", "",
            f"**{nf['value']:.2%}**: the farthest any of the {nf['intervals']} A/A ratio intervals reaches from 1 "
            f"(widest: {w['scenario']} {w['kind']} {w['workload']}, ratio {w['ratio']:.3f} "
            f"[{w['lo']:.3f}, {w['hi']:.3f}], n={w['n']}). Give this file to `fk compare --aa` to call a "
            "delta significant only when its interval clears it."] + _too_wide(nf)


def _too_wide(nf: dict) -> list[str]:
    """A floor past ``fk compare``'s default --max-margin: what that means, and what narrows it."""
    from fk_adapters.compare import MAX_MARGIN

    if nf["value"] <= MAX_MARGIN:
        return []
    return ["", f"This floor is wider than {MAX_MARGIN:.0%}, `fk compare`'s default `--max-margin`: the processes "
            "of this machine and workload vary so much that a delta measured like this one may not rule out a "
            f"regression of {MAX_MARGIN:.0%} (`fk compare` then calls it \"too noisy\", INCOMPLETE). More "
            "interleaved rounds or larger workloads (`--quick`, full size) narrow it."]


def _status_cell(row: dict) -> str:
    return row["status"] + (BEFORE_FAILURE if row.get("correctness", {}).get("measured_before_failure") else "")


def _kept_lines(rows: list[dict]) -> list[str]:
    """Per failed engine run: what its progress file kept of the phases it finished."""
    return [f"- **{r['scenario']}**: the {side} run ended {r[side].get('status')}; kept from the phases it finished: "
            + ", ".join(r[side]["kept_from_partial"]) for r in rows for side in ("baseline", "candidate")
            if r.get(side, {}).get("kept_from_partial")]


def _no_kernel_line(rows: list[dict]) -> str:
    """No slot in any row's evidence: installed nowhere, or unknown where a row kept no load records."""
    unknown = [f"{r['scenario']} ({r['status']})" for r in rows if "evidence" not in r]
    known = len(unknown) < len(rows)
    return " ".join(filter(None, (
        f"No plugin kernel was installed{' in the other scenarios' if unknown and known else ''}." if known else "",
        f"These results hold no plugin load records for {', '.join(unknown)}: whether a kernel was installed "
        "there is not known here (see `logs/<scenario>/candidate/loads/`)." if unknown else "")))


def _processes_line(row: dict) -> str:
    """The processes that loaded the plugins (and, after a failure, what each installed) and the model's workers."""
    ev = row.get("evidence")
    if ev is None:
        return (f"- {row['scenario']}: no load records in these results (the run ended {row['status']}; see "
                f"`logs/{row['scenario']}/candidate/loads/`)")
    procs = ", ".join(f"{p['pid']} ({(p['role'] or '?')[:60]}{', forked' if p.get('inherited_from') else ''}"
                      + (f"; installed {', '.join(p['installed']) or 'nothing'}" if "installed" in p else "") + ")"
                      for p in ev.get("processes", []))
    workers = ", ".join(str(w["pid"]) for w in ev.get("workers", []))
    as_of = ev.get("as_of")
    if as_of:
        return (f"- {row['scenario']} ({row['status']}; worker probe kept: {as_of}): {procs or 'none'}; "
                f"model runs in worker pid(s) {workers or 'unknown'}")
    return f"- {row['scenario']}: {procs or 'none'}; model runs in worker pid(s) {workers or '?'}"


def _output_row(row: dict) -> bool:
    """A model without tokens: judged on output diffs (its row says so, or its family does before it ran)."""
    c = row.get("correctness")
    return c.get("kind") == "outputs" if c else row.get("family", "llm") != "llm"


def _token_ref_cell(c: dict) -> str:
    """err_c / err_b of the teacher-forced logprobs against the float32 run, and greedy partings from it."""
    ref = c.get("reference")
    if not ref:
        return "no float32 run (see notes)" if c.get("reference_error") else "-"
    tf, tok = ref["teacher_forced"], ref["tokens"]
    return f"{tf['ratio_mean_abs']:.2f} ({tf['ratio_max_abs']:.2f}), {tok['parted_c']}/{tok['parted_b']}"


def _ref_ratio(worst: dict) -> str:
    if worst.get("ratio_mean_abs") is None:
        return "-"
    return f"{worst['ratio_mean_abs']:.3f} ({worst['ratio_max_abs']:.2f})"


def _output_table(rows: list[dict], results: RunResults, after_tokens: bool) -> list[str]:
    table = []
    for r in rows:
        c = r.get("correctness", {})
        worst = c.get("worst", {})
        table.append([r["scenario"], _status_cell(r), r["dtype"], len(c.get("outputs", {})) or "-",
                      _f(worst.get("max_abs")), _f(worst.get("rel_mean")),
                      _f(None if worst.get("min_cosine") is None else 1 - worst["min_cosine"]),
                      _f(worst.get("err_b_rel")), _f(worst.get("err_c_rel")), _ref_ratio(worst),
                      _f(r["baseline"].get("startup_s"), ".1f"), _f(r["candidate"].get("startup_s"), ".1f")])
    lines = ["", "Models without tokens: output diffs of one forward on the same seeded batch:", ""] \
        if after_tokens else []
    lines.append(tabulate(table, headers=["scenario", "status", "dtype", "output tensors", "max abs Δ",
                                          "mean abs Δ / mean abs baseline (worst)", "1 - cosine (worst)",
                                          "err_b: baseline vs ref", "err_c: candidate vs ref",
                                          "err_c / err_b: mean (max)", "baseline start s", "candidate start s"],
                          tablefmt="github"))
    th = results.output_thresholds or {r["dtype"]: r["correctness"]["thresholds"] for r in rows
                                               if r.get("correctness", {}).get("thresholds")}
    refs = [r["correctness"]["reference"] for r in rows if r.get("correctness", {}).get("reference")]
    if th:
        lines += ["", "Pass (output diffs): every floating output tensor on both sides, same shape, finite, with "
                  "mean |Δ| / mean |baseline| and 1 - cosine similarity at most "
                  + "; ".join(f"{t['rel_mean']:g} and {1 - t['min_cosine']:.2g} ({d})" for d, t in th.items())
                  + (", where the baseline saved no reference (or the baseline is not finite or, in float32, "
                     f"more than {metrics.REF_BLIND['float32']:g} off it; in float16/bfloat16, more than "
                     f"{metrics.ROUNDING_BLIND['bfloat16']:.0%} off it: rounding dominates those outputs, and a "
                     "candidate outside these limits there is INCONCLUSIVE)." if refs else ".")]
    if refs:
        ref = refs[0]
        lines += ["", "With the baseline's reference (the stock model's forward of the same batch one precision up: "
                  "float32 for float16/bfloat16, float64 for float32): err = |output - reference| per tensor of n "
                  "elements; pass when the candidate's mean "
                  f"err is at most ({ref['ratio_mean_abs']:g} + {ref.get('slack_mean_abs', 0):g}/sqrt(n)) x the "
                  f"baseline's and its max err at most {ref['ratio_max_abs']:g} x the baseline's. err_b / err_c: mean "
                  "err / mean |reference| of the tensor with the worst mean ratio; in parentheses the worst max ratio."]
    lines += [f"- {r['scenario']}: no {metrics.reference_dtype(r['dtype'])} reference "
              f"({r['correctness']['reference_error']}), fixed thresholds used"
              for r in rows if r.get("correctness", {}).get("reference_error")]
    return lines


def _exercised(row: dict) -> str:
    slots = row.get("evidence", {}).get("slots", {})
    if not slots:
        return "-"
    n = sum(e["status"] == E.EXERCISED for e in slots.values())
    na = sum(e["status"] == E.NOT_APPLICABLE for e in slots.values())
    return f"{n}/{len(slots) - na}" + (f" (+{na} n/a)" if na else "")


def _engine_cell(row: dict | None) -> list[str]:
    if row is None:
        return ["-"] * len(ENGINE_COLUMNS)
    tf = row.get("correctness", {}).get("teacher_forced", {})
    thr = row.get("perf", {}).get("throughput", {})
    first = next(iter(thr.values())) if thr else {}
    ratio = _ratio(first.get("tokens_per_s", first.get("items_per_s"))) if thr else "-"
    if thr and disturbed(row):
        ratio += " (disturbed)"
    return [row["status"], _exercised(row), _f(tf.get("max_abs")), ratio]


ENGINE_COLUMNS = ("status", "slots exercised", "max abs Δlogprob", "throughput ratio")


def _plugin_code(run: RunResults) -> dict:
    out: dict = {}
    for row in run.scenarios:
        for name, c in row.get("plugin_code", {}).items():
            out.setdefault(name, c)
    return out


def render_side_by_side(combined: SideBySide) -> str:
    """One candidate on several engines: a summary table, then each engine's own report."""
    runs = combined.runs
    names = [f"{r.engine} {r.engine_version}" for r in runs]
    by_engine = [{row["scenario"]: row for row in r.scenarios} for r in runs]
    scenario_names = list(dict.fromkeys(row["scenario"] for r in runs for row in r.scenarios))
    headers = ["scenario"] + [f"{n}: {h}" for n in names for h in ENGINE_COLUMNS]
    table = [[s] + [c for rows in by_engine for c in _engine_cell(rows.get(s))] for s in scenario_names]
    lines = [f"# fk run: {combined.candidate} on {' and '.join(names)}", "",
             f"**{combined.verdict}**: " + "; ".join(f"{r.engine} {r.verdict}" for r in runs), "",
             tabulate(table, headers=headers, tablefmt="github")]
    lines += ["", "Plugin code loaded by each engine (sha256 of the plugin package's sources):", ""]
    code = [[r.engine, name, f"{c['dist']} {c['version']}", c["source_sha256"][:16] or "?"]
            for r in runs for name, c in _plugin_code(r).items()]
    lines.append(tabulate(code, headers=["engine", "plugin", "distribution", "source sha256"], tablefmt="github")
                 if code else "No plugin was loaded.")
    for name in sorted({row[1] for row in code}):
        digests = {row[3] for row in code if row[1] == name}
        same = len(digests) == 1 and "?" not in digests and "mixed" not in digests
        verdict = "the same code in every engine" if same else "**NOT the same code in every engine**"
        lines += ["", f"{name}: " + verdict]
    for r in runs:
        lines += ["", "---", ""] + ["#" + ln if ln.startswith("#") else ln for ln in render_run(r).splitlines()]
    return "\n".join(lines) + "\n"
