"""Baseline vs. candidate over a suite of scenarios, each engine run in its own process."""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
import threading
import time
from dataclasses import replace

from fk_adapters import (
    __version__,
    cpu_binding,
    engine_runs,
    evidence,
    gpu_share,
    host_cpu,
    jit_watch,
    kernel_names,
    machine,
    metrics,
    probe,
    stream_agreement,
    time_attribution,
    time_split,
    wall_time,
)
from fk_adapters.engine_integrity import problems as engine_problems
from fk_adapters.results import Kind, ScenarioStatus, SlotEvidence, stamp, verdict
from fk_adapters.runner import engine_process, reference
from fk_adapters.runner.config import RunConfig
from fk_adapters.runner.reuse import (
    AA_PARTNER,
    earlier_rounds,
    finished_rows,
    first_rounds,
    kept_where,
    planned_rounds as _rounds,
    reuse_baseline,
    run_dir as _run_dir,
    run_key,
)
from fk_adapters.scenarios import Scenario, build_job, keep_workloads
from fk_adapters.weights import WeightsError, scenario_checkpoint

S, E = ScenarioStatus, SlotEvidence


ORDER = "A B, B A, A B, ... (each side first in alternate rounds)"
# --with-aa: a second stock process (A') in every round. Each even round runs the one before it backwards, so after
# every even number of rounds each pair has run in either order equally often (as A B, B A, ... does), and after an
# odd number 1 apart; after 6, every order once. (The rotation used before session 53 ran A before B 3:1 in 4 rounds
# and 6:4 in 10: a second-process effect then reads as the candidate's.)
ORDER_WITH_AA = "A B A', A' B A, B A' A, A A' B, A' A B, B A A', ... (each even round the one before it backwards)"
_WITH_AA_ROUNDS = (("baseline", "candidate", AA_PARTNER), (AA_PARTNER, "candidate", "baseline"),
                   ("candidate", AA_PARTNER, "baseline"), ("baseline", AA_PARTNER, "candidate"),
                   (AA_PARTNER, "baseline", "candidate"), ("candidate", "baseline", AA_PARTNER))


def _round_order(rnd: int, with_aa: bool = False) -> tuple[str, ...]:
    """Which side runs first in round ``rnd``: baseline in odd rounds, candidate in even ones. On the H100 the second
    process of an A/A pair ran 0.7-9.5% faster in every round of A B A B (reports/gpu/deltas-h100): alternating the
    order spreads any such position effect over both sides instead of adding it to the ratio. ``with_aa``: the three
    sides in ORDER_WITH_AA."""
    if with_aa:
        return _WITH_AA_ROUNDS[(rnd - 1) % len(_WITH_AA_ROUNDS)]
    return ("baseline", "candidate") if rnd % 2 else ("candidate", "baseline")


def gpu_share_findings(runs: dict) -> tuple[list[str], list[str]]:
    """Over the timed engine runs of a scenario ({side: [round 1, ...]}): one line per run another process shared
    the GPU with, and one per reason the GPU could not be watched (with the runs it concerns)."""
    disturbed, unwatched = [], {}
    for where, _, _, res in engine_runs.each(runs):
        share = res.get("gpu_share")
        if share is None:
            continue
        if not share.get("watched"):
            unwatched.setdefault(share.get("why") or "?", []).append(where)
        elif share.get("foreign"):
            disturbed.append(f"{where}: {gpu_share.sharing(share['foreign'])}: its timings are not comparable")
    return disturbed, [f"{', '.join(where)}: the GPU could not be watched for other processes ({why}): "
                       "these timings are unchecked" for why, where in unwatched.items()]


def _engine_runs(cfg: RunConfig, sc: Scenario, job: dict, echo) -> tuple[dict, list]:
    """Every engine process of a scenario: {side: [round 1, round 2, ...]}, run in ORDER.

    Round 1 runs the whole job (correctness, profile, perf). Later rounds profile too where the profiled run serves a
    timed latency workload (each round's pair then attributes its own timed delta), else they skip the profile; the
    A/A partner is never profiled. Stops after a round in which a run did not end ok, and returns those runs as
    (side, result) pairs."""
    runs: dict = {"baseline": [], "candidate": []} | ({AA_PARTNER: []} if cfg.with_aa else {})
    if cfg.baseline_from:
        runs["baseline"].append(reuse_baseline(cfg.baseline_from, sc.name, job))
        age = runs["baseline"][0].get("reused_age_s")
        echo(f"{sc.name} [baseline] reused from {runs['baseline'][0]['reused_from']}"
             + (f", made {wall_time.duration(age)} ago on this machine hold" if age is not None else ""))
    n = _rounds(cfg)
    unprofiled = {k: v for k, v in job.items() if k != "profile"}
    profile_later = bool((job.get("profile") or {}).get("latency"))
    plugins_of = {"baseline": [], "candidate": [] if cfg.aa else cfg.plugins, AA_PARTNER: []}

    def job_of(side: str, rnd: int) -> dict:
        return job if side != AA_PARTNER and (rnd == 1 or profile_later) else unprofiled

    def one_round(rnd: int, devices: str = "") -> dict:
        out = {}
        for side in _round_order(rnd, cfg.with_aa):
            if len(runs[side]) >= rnd:
                continue
            tag = side if n == 1 else f"{side} {rnd}/{n}" + (f" on GPU {devices}" if devices else "")
            out[side] = engine_process.start(cfg, sc, job_of(side, rnd), _run_dir(cfg, sc, side, rnd), plugins_of[side],
                                        tag, echo, devices=devices)
            out[side]["round"] = rnd
        return out

    took, cold = earlier_rounds(cfg, sc, runs, job_of, echo)  # seconds per batch of rounds
    first = len(took) + 1
    sets = cfg.gpus or ("",)
    batches = [[first]] + [list(range(r, min(r + len(sets), n + 1))) for r in range(first + 1, n + 1, len(sets))]
    for batch in batches if first <= n else []:  # round 1 alone (it warms the compile caches both sides then share),
        # later ones side by side. Round 2 is judged by round 1 (cold compiles and all), later ones by the longest of
        # the warm rounds; the first round after rounds kept from another machine hold by round 1 (cold again)
        by_first = len(took) == 1 or (cold and batch[0] == first)
        guess = took[0] if by_first else max(took[1:] or [0.0])
        if took and cfg.stop_by and time.time() + guess > cfg.stop_by:
            which = "round 1" if by_first else "the longest round after the first"
            echo(f"{sc.name}: round {batch[0]} of {n} not started: as long as {which} ({guess:.0f} s) it would end "
                 "past --time-budget")
            break
        t0 = time.time()
        done = side_by_side(one_round, list(zip(batch, sets)))
        took.append(time.time() - t0)
        for side in runs:
            runs[side] += [d[side] for d in done if side in d]
        bad = [(side, d[side]) for d in done for side in d if d[side]["status"] != "ok"]
        if bad:
            return runs, bad
    return runs, []


def side_by_side(fn, calls: list[tuple]) -> list:
    """[fn(*args) for args in calls], run at once in daemon threads (one call: in this thread). Daemon threads, so that
    an interrupted fk exits at once and each engine's reaper (``reaper.py``) then stops it: a pool would first wait
    for every engine run to end."""
    if len(calls) == 1:
        return [fn(*calls[0])]
    out, errors = [None] * len(calls), []

    def work(i: int, args: tuple) -> None:
        try:
            out[i] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, args), daemon=True) for i, args in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def native_names(cfg: RunConfig, base: dict) -> set[str]:
    """Kernel names the stock engine launches: the baseline's own profile of this job, and the names committed for
    this engine version (``kernel_names.known_native``)."""
    return kernel_names.known_native(cfg.engine.name, base.get("engine_version")) | kernel_names.launched(
        base.get("profile"))


def _round_checks(cfg: RunConfig, runs: dict, first_ev: dict, native: set[str] = frozenset()) -> list[str]:
    """Rounds after the first must be what they claim: stock baselines, candidates whose kernels ran where
    round 1's did."""
    out = []
    want = {s for s, e in first_ev.get("slots", {}).items() if e["status"] == E.EXERCISED}
    for i, (b, c) in enumerate(zip(runs["baseline"][1:], runs["candidate"][1:]), 2):
        if b["loads"]:
            out.append(f"round {i}: the baseline loaded fk plugins")
        if cfg.aa:
            continue
        ev = evidence.judge(c, c["loads"], evidence_mode(cfg), native, cfg.device)
        missed = sorted(s for s in want if ev["slots"].get(s, {}).get("status") != E.EXERCISED)
        if missed:
            out.append(f"round {i}: the plugin kernel did not run for {', '.join(missed)}")
    return out


def _seeded_weights(cfg: RunConfig, sc: Scenario, echo) -> tuple[str, str, float]:
    """The scenario's seeded checkpoint (``scenario_checkpoint``) and the seconds it took (cached: about none)."""
    t0 = time.perf_counter()
    model_dir, key = scenario_checkpoint(sc, engine_process.cache_root(cfg), echo)
    return model_dir, key, round(time.perf_counter() - t0, 1)


# The profiled batch where the job times no latency workload: the first correctness prompts (up to 32), 16 tokens each.
# With one, the profiled run serves its largest batch instead (``profiled_run``): session 48's 32 x 16 step, a prefill
# of 2,048 tokens and 15 decodes, ran 0.86 as fast as stock where no timed workload ran slower than 0.93
PROFILED_STEPS = {"requests": 32, "max_tokens": 16}


def profiled_run(job: dict) -> dict:
    """What the profiled run serves: one run of the job's largest-batch latency workload, the requests its timed repeats
    serve, so the profile's delta and its attribution are that workload's (``time_attribution.against_timed``)."""
    latency = (job.get("perf") or {}).get("latency") or {}
    if not latency or not all("prompts" in w and "output_len" in w for w in latency.values()):
        return dict(PROFILED_STEPS)
    return dict(PROFILED_STEPS, latency=max(latency, key=lambda name: len(latency[name]["prompts"])))


def scenario_job(cfg: RunConfig, sc: Scenario, model_dir: str) -> dict:
    """The job both sides of ``sc`` run: the scenario's workloads as this run's options shape them."""
    job = build_job(sc, model_dir, cfg.mode, cfg.quick, engine=cfg.engine.name)
    if cfg.correctness_only:
        job.pop("perf", None)
    elif "perf" in job:
        if cfg.repeats:
            job["perf"]["repeats"] = cfg.repeats
            if "latency_repeats" in job["perf"]:
                job["perf"]["latency_repeats"] = cfg.repeats
        if cfg.warmup_share < 1:
            job["perf"]["warmup_share"] = cfg.warmup_share
        if cfg.workloads:
            job["perf"] = keep_workloads(job["perf"], cfg.workloads)
    if cfg.profile:
        job["profile"] = profiled_run(job)
    return job


def run_scenario(cfg: RunConfig, sc: Scenario, echo) -> dict:
    try:
        model_dir, weights_key, weights_s = _seeded_weights(cfg, sc, echo)
    except WeightsError as exc:  # no engine ran; a suite's other scenarios still run
        return _no_weights(cfg, sc, str(exc))
    job = scenario_job(cfg, sc, model_dir)
    runs, bad = _engine_runs(cfg, sc, job, echo)
    weights = {"weights": weights_key, "weights_s": weights_s}
    row = judged_row(cfg, sc, job, {side: runs[side] for side in ("baseline", "candidate")}, bad, weights, echo)
    if cfg.with_aa:  # the stock engine's second process of every round against its first: the A/A of these rounds
        row[AA_PARTNER] = judged_row(replace(cfg, aa=True), sc, job,
                                     {"baseline": runs["baseline"], "candidate": runs[AA_PARTNER]}, bad, weights, echo)
    return row


def judged_row(cfg: RunConfig, sc: Scenario, job: dict, runs: dict, bad: list, weights: dict, echo) -> dict:
    """A scenario's row from its engine processes (``runs``: {"baseline": [each round], "candidate": [...]}; ``bad``:
    the (side, result) pairs of runs that did not end ok): correctness, perf, evidence and verdict."""
    base, cand = runs["baseline"][0], runs["candidate"][0]
    summary = engine_process.summary
    row = {"scenario": sc.name, "description": sc.description, "dtype": sc.dtype, **weights,
           "model": {k: sc.model[k] for k in ("architectures", "hidden_size", "num_hidden_layers", "vocab_size")
                     if k in sc.model},
           "baseline": summary(base), "candidate": summary(cand), "failures": [], "timeout_s": cfg.timeout_s}
    if _rounds(cfg) > 1:
        row["rounds"] = {"planned": _rounds(cfg), "order": ORDER_WITH_AA if cfg.with_aa else ORDER,
                         "runs": [[summary(r) for r in runs["baseline"]], [summary(r) for r in runs["candidate"]]]}
    if base["loads"]:
        row["failures"].append("baseline loaded fk plugins: it is not a stock engine")
    disturbed, notes = _run_notes(cfg, job, runs)
    if _rounds(cfg) > 1 and not bad and len(runs["candidate"]) < _rounds(cfg):
        row["rounds"]["ran"] = len(runs["candidate"])
        notes.insert(0, f"{len(runs['candidate'])} of the {_rounds(cfg)} planned rounds ran: the next would have "
                        "ended past --time-budget; the rounds that ran are judged")
    kept = sum(1 for r in runs["candidate"] if r.get("kept_round"))
    if kept:
        row["rounds"]["kept"] = kept
        notes.insert(0, f"{first_rounds(kept)} {'was' if kept == 1 else 'were'} kept from an earlier run into this "
                        "folder that --time-budget cut "
                        f"(their engine processes: {os.path.dirname(runs['candidate'][0]['reused_from'])}); "
                        + kept_where(runs))
    if notes:
        row["notes"] = notes
    if bad:
        row["status"] = verdict.failed_run([r["status"] for _, r in bad])
        row["failures"] += [_failed(s, r) for s, r in bad]
        _measured_before_failure(cfg, sc, row, base, cand)
        return row
    if sc.family != "llm":
        row["family"] = sc.family
    row["correctness"] = correctness(base, cand, sc.dtype)
    if reference.wants_reference(row["correctness"], sc.dtype, cfg.engine.name, sc.family):
        row["correctness"], row["reference"] = reference.judge(cfg, sc, job, row["correctness"], base, cand, echo)
        row["notes"] = [row["correctness"]["summary"]] + reference.reused_note(row["reference"]) + row.get("notes", [])
    if _rounds(cfg) > 1:
        row["perf"] = metrics.performance_rounds([r.get("perf", {}) for r in runs["baseline"]],
                                                 [r.get("perf", {}) for r in runs["candidate"]])
    else:
        row["perf"] = metrics.performance(base.get("perf", {}), cand.get("perf", {}))
    if disturbed:
        row["perf"]["disturbed"] = disturbed
    row["failures"] += row["correctness"]["failures"]
    if cfg.aa:
        row["failures"] += _round_checks(cfg, runs, {})
        row["status"] = verdict.aa_status(row)
        return row
    return _judged_candidate(cfg, job, runs, row)


def _judged_candidate(cfg: RunConfig, job: dict, runs: dict, row: dict) -> dict:
    """``row`` with the candidate's evidence (its kernels ran: calls, profiler names), time split and verdict."""
    base, cand = runs["baseline"][0], runs["candidate"][0]
    native = native_names(cfg, base)
    row["evidence"] = evidence.judge(cand, cand["loads"], evidence_mode(cfg), native, cfg.device)
    where = _time_split(job, runs)
    if where:
        where["slots"] = time_split.per_slot(where, row["evidence"], cand.get("profile"))
        row["time_split"] = where
    row["plugin_code"] = evidence.plugin_code(cand["loads"])
    row["status"], more = verdict.scenario(row, cand["loads"], cfg.allow_unexercised)
    missed = _round_checks(cfg, runs, row["evidence"], native)
    row["failures"] += more + missed
    row["status"] = verdict.after_rounds(row["status"], missed)
    notes = _notes(row["evidence"], cand) + _profile_notes(base, cand)
    if notes:
        row["notes"] = row.get("notes", []) + notes
    return row


def _time_split(job: dict, runs: dict) -> dict | None:
    """Where round 1's profiled run's device time went, and every round's profiled pair set against its processes'
    timed delta of the workload the profiled runs served."""
    where = time_split.split(runs["baseline"][0].get("profile"), runs["candidate"][0].get("profile"))
    timed = where and time_attribution.against_timed(list(zip(runs["baseline"], runs["candidate"])),
                                                     (job.get("profile") or {}).get("latency"))
    if timed:
        where["timed"] = timed
    varies = where and time_split.own_variation([r.get("profile") for r in runs["baseline"]])
    if varies:
        where["stock_varies"] = varies
    return where


def _no_weights(cfg: RunConfig, sc: Scenario, why: str) -> dict:
    """The row of a scenario whose seeded weights could not be written: RUNTIME_ERROR, neither side run."""
    side = {"status": "not run", "error": f"no seeded weights: {why}"}
    return {"scenario": sc.name, "description": sc.description, "dtype": sc.dtype, "weights": None,
            "weights_error": why, "baseline": side, "candidate": dict(side), "status": S.RUNTIME_ERROR,
            "failures": [f"seeded weights: {why}"], "timeout_s": cfg.timeout_s}


def _failed(side: str, res: dict) -> str:
    rnd = res.get("round", 1)
    return f"{side}{f' (round {rnd})' if rnd > 1 else ''}: {res.get('error', res['status'])}"


def _run_notes(cfg: RunConfig, job: dict, runs: dict) -> tuple[list[str], list[str]]:
    """The GPU-sharing findings that disturbed the timing, and every note the run's set-up earns the report."""
    disturbed, unwatched = gpu_share_findings(runs)
    notes = (disturbed + unwatched + jit_watch.findings(runs) + host_cpu.findings(runs)
             + stream_agreement.findings(runs) + cpu_binding.findings(runs) + wall_time.start_findings(runs))
    if job.get("graph_sizes") and cfg.engine.name == "vllm" and cfg.device == "cuda" and cfg.mode == "compiled":
        notes.append(f"vLLM captured CUDA graphs for batch sizes {job['graph_sizes']} only, on both sides: --quick / "
                     "--smoke capture up to the largest batch the job sends, not vLLM's default sizes")
    if len(cfg.gpus) > 1 and _rounds(cfg) > 1:
        notes.append(f"round 1 ran on GPU {cfg.gpus[0]}, later rounds side by side on GPUs {', '.join(cfg.gpus)} "
                     "(both sides of a round on one GPU): the round-to-round variation, and so each interval, "
                     "includes the GPUs' own")
    return disturbed, notes


def _measured_before_failure(cfg: RunConfig, sc: Scenario, row: dict, base: dict, cand: dict) -> None:
    """A scenario whose engine run failed keeps what its round 1 measured: correctness where both sides got that far
    (no float32 re-judging, no verdict: the status stays the failure) and, for a candidate, the evidence its plugin
    load records and latest probe give. Never perf: the timed phase did not finish everywhere."""
    if _correctness_done(base) and _correctness_done(cand):
        row["correctness"] = dict(correctness(base, cand, sc.dtype), measured_before_failure=True)
        row["failures"] += [f"correctness measured before the failure: {f}" for f in row["correctness"]["failures"]]
    if cfg.aa:
        return
    kept, as_of = _latest_probe(cand)
    row["evidence"] = evidence.judge(dict(cand, probe=kept), cand["loads"], evidence_mode(cfg),
                                     native_names(cfg, base), cfg.device)
    row["evidence"]["as_of"] = as_of
    for proc, rec in zip(row["evidence"].get("processes", []), cand["loads"]):  # what each process's load record says
        proc["installed"] = sorted(rec.get("installed", {}))
    if not kept:  # no worker reported: the slots' layers and calls are unknown, not absent
        for e in row["evidence"]["slots"].values():
            e["status"], e["proof"] = E.NOT_JUDGED, f"no worker probe was kept: {NO_PROBE}"
    row["plugin_code"] = evidence.plugin_code(cand["loads"])


def _correctness_done(res: dict) -> bool:
    """The run finished its correctness phase: teacher-forced logprobs after its tokens, or its saved outputs."""
    return "teacher_logprobs" in res if "tokens" in res else bool(res.get("outputs_file"))


_PROBES = (("probe", "the end of the run"), ("probe_after_correctness", "the end of correctness"),
           ("probe_after_start", "engine start"))
NO_PROBE = "the run failed before its workers reported"


def _latest_probe(res: dict) -> tuple[list, str]:
    """The last probe a (possibly failed) run kept, and when it was taken."""
    for key, when in _PROBES:
        if res.get(key):
            return res[key], when
    return [], f"none ({NO_PROBE})"


def correctness(base: dict, cand: dict, dtype: str) -> dict:
    """Token metrics when both runs generated tokens; output diffs when both saved their outputs (no tokens), judged
    against the baseline's reference forward (one precision up) where it saved one."""
    if "tokens" in base and "tokens" in cand:
        return metrics.correctness(base, cand, dtype)
    if base.get("outputs_file") and cand.get("outputs_file"):
        res = metrics.output_correctness(base["outputs_file"], cand["outputs_file"], dtype, base.get("reference_file"))
        if base.get("reference_error"):
            res["reference_error"] = base["reference_error"]
        return res
    return {"dtype": dtype, "passed": False, "failures": ["the runs carry neither tokens nor saved outputs to compare"]}


def _notes(ev: dict, cand: dict) -> list[str]:
    """Why a candidate may have run stock: no selected slot applies to the model; modules left stock, and why."""
    notes = []
    slots = ev["slots"]
    if verdict.no_slot_applies(slots):
        notes.append(f"no selected slot applies to this model (no layer it built routes to {', '.join(slots)}): "
                     "the candidate ran the stock model")
    left = probe.merged(cand.get("probe"), "not_routed")
    if left:
        notes.append("left stock: " + "; ".join(f"{k} x{n}" for k, n in sorted(left.items())))
    return notes


def _profile_notes(base: dict, cand: dict) -> list[str]:
    """A Triton compile inside a profiled step: its host waits then hold the compile, not serving."""
    return [f"the {side}'s profiled step compiled Triton kernels ({res['profile_compiled']}): its host waits hold "
            "the compiles" for side, res in (("baseline", base), ("candidate", cand)) if res.get("profile_compiled")]


def evidence_mode(cfg: RunConfig) -> str:
    traced, graphs = cfg.engine.modes(cfg.mode, cfg.device)
    return "compiled" if traced else "graphs" if graphs else "eager"


def run_suite(cfg: RunConfig, scenarios: list[Scenario], engine_version: str, echo=print) -> dict:
    """Run each scenario, writing results.json after every one; scenarios this same run already finished in
    out_dir (an interrupted suite) are kept, not run again, unless ``cfg.force``."""
    os.makedirs(cfg.out_dir, exist_ok=True)
    path = os.path.join(cfg.out_dir, "results.json")
    done, resume = finished_rows(cfg, path, echo, engine_version)
    results = _suite_header(cfg, engine_version)
    kept = [sc.name for sc in scenarios if sc.name in done]
    if kept:
        echo(f"resuming: {len(kept)} of {len(scenarios)} scenario(s) already finished in {path} "
             f"({', '.join(kept)}); --force runs them again")
    n, t0, lock = len(scenarios), time.monotonic(), threading.Lock()
    rows = {name: done[name] for name in kept}
    todo = [(i, sc) for i, sc in enumerate(scenarios, 1) if sc.name not in rows]
    for i, sc in enumerate(scenarios, 1):
        if sc.name in rows:
            echo(f"[{i}/{n}] {sc.name} ({cfg.engine.name}): {rows[sc.name]['status']} (kept from the earlier run)")
    lanes = [replace(cfg, gpus=(d,)) for d in cfg.gpus] if spreads_scenarios(cfg) else [cfg]
    if len(lanes) > 1:
        todo.sort(key=lambda item: -size_estimate(item[1]))  # the largest first: the lanes then end together
        echo(f"{len(todo)} scenario(s) side by side on GPUs {', '.join(cfg.gpus)}, one at a time on each, "
             "the largest models (by a rough parameter count) first")

    def publish() -> None:  # after every scenario: an interrupted suite keeps what finished, as a FAIL
        results["scenarios"] = [rows[sc.name] for sc in scenarios if sc.name in rows]
        results["wall_s"] = round(time.monotonic() - t0, 1)
        finish(results, cfg, (len(rows), n))
        _publish_aa(cfg, results, (len(rows), n))
        _write_atomic(path, results)

    def lane(lane_cfg: RunConfig) -> None:
        while True:
            with lock:
                if not todo:
                    return
                i, sc = todo.pop(0)
            tag = f"[{i}/{n}] {sc.name} ({cfg.engine.name})"
            echo(tag + (f" on GPU {lane_cfg.gpus[0]}" if len(lanes) > 1 else ""))
            try:
                row = _spanned(replace(lane_cfg, earlier_rounds=tuple(resume.get(sc.name, ()))), sc, echo)
            except BaseException:
                with lock:
                    todo.clear()  # the other lanes stop after their current scenario; the error is raised
                raise
            if len(lanes) > 1:
                row["devices"] = lane_cfg.gpus[0]
                row.setdefault("notes", []).append(
                    f"ran on GPU {lane_cfg.gpus[0]}, both sides: the suite's scenarios ran side by side on GPUs "
                    f"{', '.join(cfg.gpus)}, one a GPU, so its figures compare with other scenarios' only across GPUs")
            with lock:
                rows[sc.name] = row
                publish()
                ran, left = len(rows) - len(kept), len(todo)
                echo(_finished_line(tag, row, time.monotonic() - t0, ran, left))

    if todo:
        side_by_side(lane, [(c,) for c in lanes])
    elif rows:
        publish()
    return results


def _spanned(cfg: RunConfig, sc: Scenario, echo) -> dict:
    """``run_scenario``'s row with its span (weights to verdict) in seconds: the wall-time table's whole."""
    began = time.monotonic()
    row = run_scenario(cfg, sc, echo)
    row["span_s"] = round(time.monotonic() - began, 1)
    return row


def engine_tuning_env(cfg: RunConfig) -> dict:
    """The tuning variables every engine process of the run has: those fk was started with, and those fk sets for
    both sides (``EngineSpec.env``: e.g. vLLM's ``VLLM_USE_AOT_COMPILE=0``)."""
    return {**machine.tuning_env(), **machine.tuning_env(cfg.engine.env(cfg.device))}


def _suite_header(cfg: RunConfig, engine_version: str) -> dict:
    """What results.json says of the whole run, before its scenarios."""
    return {**stamp(Kind.RUN), "fk_version": __version__,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": cfg.command, "engine": cfg.engine.name, "engine_version": engine_version,
            "device": cfg.device, "host": platform.node(), "machine": machine.identity(),
            "gpus": gpu_share.gpu_names() if cfg.device == "cuda" else [],
            "python": sys.version.split()[0], "mode": cfg.mode,
            "mode_detail": cfg.engine.describe_mode(cfg.mode, cfg.device),
            "candidate": cfg.candidate_label, "plugins": [] if cfg.aa else cfg.plugins, "aa": cfg.aa,
            "quick": cfg.quick, "correctness_only": cfg.correctness_only,
            **({"warmup_share": cfg.warmup_share} if cfg.warmup_share < 1 else {}),
            **({"workloads": list(cfg.workloads)} if cfg.workloads else {}),
            "baseline_from": cfg.baseline_from, "reference_from": cfg.reference_from,
            "interleave": _rounds(cfg),
            "run_key": run_key(cfg), "tuning_env": engine_tuning_env(cfg),
            "cpu_binding": os.environ.get(cpu_binding.OFF_VAR, "1") if cfg.device == "cuda" else "",
            "thresholds": metrics.THRESHOLDS,
            "output_thresholds": metrics.OUTPUT_THRESHOLDS, "engine_integrity": cfg.engine_integrity,
            "scenarios": []}


def _finished_line(tag: str, row: dict, took: float, ran: int, left: int) -> str:
    """The progress line of a finished scenario: its status, and the suite's time so far and left."""
    eta = f", about {wall_time.duration(took / ran * left)} left" if left else ""
    return (f"{tag}: {row['status']}" + (f" ({'; '.join(row['failures'])})" if row['failures'] else "")
            + (" (performance DISTURBED: another process used the GPU)" if gpu_share.disturbed(row) else "")
            + f" [{wall_time.duration(took)} so far{eta}]")


def size_estimate(sc) -> int:
    """About how many parameters a scenario's [model] table builds (its language model's, for a VLM): an order in
    which to start a suite's scenarios, not a figure to report."""
    m = getattr(sc, "model", None) or {}
    m = m.get("text_config") or m
    hidden = m.get("hidden_size") or m.get("d_model") or 0
    layers = m.get("num_hidden_layers") or m.get("num_layers") or 0
    inter = m.get("moe_intermediate_size") or m.get("intermediate_size") or 4 * hidden
    experts = m.get("num_local_experts") or m.get("n_routed_experts") or m.get("num_experts") or 1
    return int(layers * hidden * (4 * hidden + 3 * inter * experts))


def spreads_scenarios(cfg: RunConfig) -> bool:
    """Whether ``--gpus`` spreads the suite's scenarios (one a device set) rather than a scenario's rounds."""
    return len(cfg.gpus) > 1 and _rounds(cfg) < 2


def _write_atomic(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(tmp, path)


def finish(results: dict, cfg: RunConfig, progress: tuple[int, int] | None = None) -> None:
    """The suite's coverage, problems and verdict (``results.verdict``); an A/A run's noise floor. ``progress``
    (scenarios done, of how many): a file written mid-suite reads as failed until the last one is in."""
    rows = results["scenarios"]
    cov = results["coverage"] = verdict.coverage(rows)
    problems = verdict.suite_problems(rows, cov, engine_problems(cfg.engine_integrity), cfg.allow_unexercised,
                                      cfg.allow_uncovered, cfg.aa)  # engines run with --allow-modified-engine
    if progress:
        problems += verdict.unfinished(*progress, "scenarios")
    results["verdict"] = verdict.of_problems(problems)
    results["problems"] = problems
    if cfg.aa:
        results["noise_floor"] = measured_noise_floor(results)


def _publish_aa(cfg: RunConfig, results: dict, progress: tuple[int, int]) -> None:
    """Write a --with-aa run's ``aa_results`` (OUT/aa/results.json) and say where in its own results, with its floor."""
    if not cfg.with_aa:
        return
    aa = aa_results(cfg, results, progress)
    results["with_aa"] = {"results": os.path.join(AA_PARTNER, "results.json"), "verdict": aa["verdict"],
                          "noise_floor": aa["noise_floor"]}
    os.makedirs(os.path.join(cfg.out_dir, AA_PARTNER), exist_ok=True)
    _write_atomic(os.path.join(cfg.out_dir, AA_PARTNER, "results.json"), aa)


def aa_results(cfg: RunConfig, results: dict, progress: tuple[int, int] | None = None) -> dict:
    """A --with-aa run's A/A of the same rounds (each row's ``aa``: the second stock process against the first) as
    the results file of an `fk run --aa`, its noise floor included, for its own report and `fk compare --aa`."""
    aa_cfg = replace(cfg, aa=True, out_dir=os.path.join(cfg.out_dir, AA_PARTNER))
    out = _suite_header(aa_cfg, results["engine_version"])
    out["scenarios"] = [r[AA_PARTNER] for r in results["scenarios"] if AA_PARTNER in r]
    out["wall_s"] = results.get("wall_s")
    finish(out, aa_cfg, progress)
    return out


def measured_noise_floor(results: dict) -> dict | None:
    """This machine's noise floor from an A/A run (``compare.noise_floor_from_aa``), stored with the results:
    the value, how many ratio intervals it comes from, and the widest one."""
    from fk_adapters.compare import CompareError, noise_floor_from_aa

    try:
        nf = noise_floor_from_aa(results)
    except CompareError:
        return None
    widest = max(nf["intervals"], key=lambda iv: iv["half_width"])
    return {"value": nf["value"], "intervals": len(nf["intervals"]),
            "paired": all(iv.get("paired") for iv in nf["intervals"]),
            "widest": {k: widest.get(k) for k in ("scenario", "kind", "workload", "metric", "ratio", "lo", "hi", "n")}}
