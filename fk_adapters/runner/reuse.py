"""Runs of an earlier `fk run` taken up again: --baseline-from's baseline, a float32 reference, the rounds of a
scenario --time-budget cut, and the scenarios a re-run into the same --out keeps (its run key)."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
from typing import TYPE_CHECKING

from fk_adapters import gpu_share, machine, probe
from fk_adapters.results import ScenarioStatus as S
from fk_adapters.runner.config import RunConfig
from fk_adapters.runner.proc import GPU_SHARE_FILE

if TYPE_CHECKING:
    from fk_adapters.scenarios import Scenario

AA_PARTNER = "aa"  # --with-aa's second stock process: logs/<scenario>/aa, aa-r2, ...; the row's A/A of the same rounds


def planned_rounds(cfg: RunConfig) -> int:
    return max(1, cfg.interleave)


def run_dir(cfg: RunConfig, sc: Scenario, side: str, rnd: int) -> str:
    """Round 1 keeps the plain side folder (what --baseline-from reads); later rounds get -r2, -r3, ..."""
    return os.path.join(cfg.out_dir, "logs", sc.name, side if rnd == 1 else f"{side}-r{rnd}")


class BaselineMismatch(ValueError):
    """--baseline-from points at a run that is not this scenario's baseline."""


def reuse_baseline(prev_out: str, scenario: str, job: dict) -> dict:
    """The baseline run of an earlier `fk run` (same job: model, prompts, mode, engine args) made on this same
    machine hold (``machine.identity``, kept beside each run as MACHINE_FILE), with its age (``reused_age_s``):
    timings of another machine or hold are not comparable with this one's."""
    made = _machine_record(os.path.join(prev_out, "logs", scenario, "baseline"))
    if not machine.same(made.get("machine"), machine.identity()):
        raise BaselineMismatch(f"the baseline of {scenario} under {prev_out} was not made on this machine hold "
                               f"({'it records none' if not made.get('machine') else 'another host, boot or hold'}): "
                               "its timings are not comparable; run the baseline again here")
    res = reuse_run(prev_out, scenario, job, "baseline")
    res["reused_age_s"] = round(time.time() - made["finished"]) if "finished" in made else None
    return res


MACHINE_FILE = "machine.json"


def reuse_run(prev_out: str, scenario: str, job: dict, side: str) -> dict:
    """The ``side`` run (baseline, reference) of an earlier `fk run` of the same job."""
    folder = os.path.abspath(os.path.join(prev_out, "logs", scenario, side))
    try:
        with open(os.path.join(folder, "job.json")) as f:
            prev_job = json.load(f)
        with open(os.path.join(folder, "result.json")) as f:
            res = json.load(f)
    except FileNotFoundError:
        raise BaselineMismatch(f"no {side} run of {scenario} under {prev_out}") from None
    if "perf" not in job:  # a correctness-only run reuses the correctness of a run that also timed
        prev_job.pop("perf", None)
        res.pop("perf", None)
    if prev_job != job:
        differ = sorted(k for k in prev_job.keys() | job.keys() if prev_job.get(k) != job.get(k))
        raise BaselineMismatch(f"the {side} of {scenario} under {prev_out} ran a different job "
                               f"(its {', '.join(differ)} differ: run with the same flags, --smoke / --quick "
                               "included)")
    res.update(reused_from=folder, log=os.path.join(folder, "engine.log"), loads=probe.read_loads(folder))
    share = os.path.join(folder, GPU_SHARE_FILE)
    if os.path.exists(share):  # the earlier run's GPU watch: its timings are reused
        with open(share) as f:
            res["gpu_share"] = json.load(f)
    res.setdefault("wall_s", 0.0)
    return res


def earlier_rounds(cfg: RunConfig, sc: Scenario, runs: dict, job_of, echo) -> tuple[list[float], bool]:
    """The rounds of ``cfg.earlier_rounds`` as an earlier run into out_dir left them (each process's result.json for
    the same job), added to ``runs``; with each kept round's seconds and whether they were made on another machine
    hold (the next round then starts cold). Where one is missing or ran another job, none is kept: every round
    runs."""
    k = len(cfg.earlier_rounds)
    if not k:
        return [], False
    kept: dict = {side: [] for side in runs}
    here = machine.identity()
    try:
        for rnd in range(1, k + 1):
            for side in runs:
                if len(runs[side]) >= rnd:  # --baseline-from's
                    continue
                folder = os.path.basename(run_dir(cfg, sc, side, rnd))
                res = reuse_run(cfg.out_dir, sc.name, job_of(side, rnd), folder)
                if res.get("status") != "ok":
                    raise BaselineMismatch(f"its {folder} run ended {res.get('status')}")
                secs = cfg.earlier_rounds[rnd - 1].get(side, 0.0)
                kept[side].append(dict(res, round=rnd, kept_round=True, wall_s=secs,
                                       kept_here=machine.same(made_on(res["reused_from"]), here)))
    except BaselineMismatch as exc:
        echo(f"{sc.name}: the earlier rounds are not kept ({exc}): all {planned_rounds(cfg)} rounds run")
        return [], False
    for side in runs:
        runs[side] += kept[side]
    echo(f"{sc.name}: {first_rounds(k)} kept from the earlier run in {cfg.out_dir} ({kept_where(runs)}); "
         f"{first_rounds(planned_rounds(cfg), k + 1)} run now")
    return [sum(r.values()) for r in cfg.earlier_rounds], not all(r["kept_here"] for rs in kept.values() for r in rs)


def first_rounds(k: int, first: int = 1) -> str:
    return f"round {first}" if k == first else f"rounds {first}-{k}"


def kept_where(runs: dict) -> str:
    """Where the kept rounds of ``runs`` were made, in words."""
    if all(r["kept_here"] for side in runs.values() for r in side if r.get("kept_round")):
        return "made on this machine hold"
    return ("made on another machine hold with the same GPUs and engine build: each round pairs its own processes, "
            "and the interval over rounds holds the variation between the machines")


def made_on(folder: str) -> dict | None:
    """The machine hold an engine process's folder records it ran on, or None."""
    return _machine_record(folder).get("machine")


def _machine_record(folder: str) -> dict:
    """What an engine process's folder records of where and when it ran (MACHINE_FILE), or {}."""
    try:
        with open(os.path.join(folder, MACHINE_FILE)) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}


class ResumeMismatch(ValueError):
    """out_dir holds results of a different run."""


def run_key(cfg: RunConfig) -> dict:
    """What must match for a re-run to reuse an earlier run's finished scenarios."""
    key = {"engine": cfg.engine.name, "plugins": [] if cfg.aa else list(cfg.plugins), "aa": cfg.aa,
            "device": cfg.device, "mode": cfg.mode, "quick": cfg.quick, "interleave": planned_rounds(cfg),
            "correctness_only": cfg.correctness_only, "baseline_from": cfg.baseline_from, "profile": cfg.profile,
            "code": cfg.code}
    if cfg.repeats:  # only when given: the key of a run without it stays what it was
        key["repeats"] = cfg.repeats
    if cfg.warmup_share < 1:  # likewise
        key["warmup_share"] = cfg.warmup_share
    if cfg.workloads:  # likewise
        key["workloads"] = list(cfg.workloads)
    if cfg.with_aa:  # likewise
        key["with_aa"] = True
    tuning = machine.tuning_env()
    if tuning:  # likewise
        key["tuning_env"] = tuning
    return json.loads(json.dumps(key, default=str))  # as a results file holds it (tuples as lists)


def finished_rows(cfg: RunConfig, path: str, echo, engine_version: str) -> tuple[dict, dict]:
    """The scenario rows an interrupted earlier run of this same configuration wrote to ``path``, and the scenarios
    to resume. A file that is not JSON (cut short) is said and copied aside before this run overwrites it; a TIMEOUT
    under another time limit than ``cfg.timeout_s`` is not kept: it runs again. A scenario --time-budget cut before
    its last round is not finished: where the GPUs and ``engine_version`` are the same, it is resumed ({scenario:
    each round that ran, as {side: seconds}}) and those rounds are kept (``earlier_rounds``); else all rounds run."""
    resume: dict = {}
    if cfg.force or not os.path.exists(path):
        return {}, resume
    try:
        with open(path) as f:
            prev = json.load(f)
    except OSError:
        return {}, resume
    except ValueError as exc:
        aside = f"{path}.corrupt-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}"
        shutil.copy2(path, aside)
        echo(f"{path} is not valid JSON ({exc}): nothing is resumed from it; copied to {aside} before this run "
             "overwrites it")
        return {}, resume
    if "run_key" not in prev:
        raise ResumeMismatch(f"{path} holds results of an earlier fk that did not record what it ran: "
                             "give --force to replace them, or another --out")
    if prev.get("run_key") != run_key(cfg):
        raise ResumeMismatch(f"{path} holds a different run ({_key_diff(prev.get('run_key') or {}, run_key(cfg))}): "
                             "give --force to replace it, or another --out")
    rows = {r["scenario"]: r for r in prev.get("scenarios", [])}
    retry = {n: r.get("timeout_s") for n, r in rows.items()
             if r["status"] == S.TIMEOUT and r.get("timeout_s") != cfg.timeout_s}
    if retry:
        echo(f"running again {len(retry)} scenario(s) that timed out under another time limit ("
             + ", ".join(f"{n}: {'?' if t is None else f'{t:.0f}'} s" for n, t in retry.items())
             + f"; now {cfg.timeout_s:.0f} s)")
    unwritten = [n for n, r in rows.items() if r.get("weights_error")]
    if unwritten:
        echo(f"running again {len(unwritten)} scenario(s) whose seeded weights failed ({', '.join(unwritten)})")
    cut = {n: _round_seconds(r) for n, r in rows.items() if "ran" in (r.get("rounds") or {})}  # rounds left out
    gpus = gpu_share.gpu_names() if cfg.device == "cuda" else []
    other = [f"{k}: {prev.get(k)!r} there, {v!r} here" for k, v in (("gpus", gpus), ("engine_version", engine_version))
             if prev.get(k) != v]
    if cut and (other or cfg.baseline_from):
        echo(f"running again {len(cut)} scenario(s) that --time-budget stopped before their last round "
             f"({', '.join(cut)}): all {planned_rounds(cfg)} rounds ("
             + ("; ".join(other) if other else "--baseline-from: round 1's baseline is that run's") + ")")
    elif cut:
        echo(f"resuming {len(cut)} scenario(s) that --time-budget stopped before their last round: "
             + ", ".join(f"{n} after round {len(k)}" for n, k in cut.items()) + "; --force runs every round again")
        resume.update(cut)
    return {n: r for n, r in rows.items() if n not in retry and n not in unwritten and n not in cut}, resume


def _round_seconds(row: dict) -> list[dict]:
    """Each round of a cut scenario's row as {side: its process's wall time} (the A/A partner's too)."""
    runs = row["rounds"].get("runs") or [[], []]
    aa = ((row.get(AA_PARTNER) or {}).get("rounds") or {}).get("runs") or [[], []]
    sides = {"baseline": runs[0], "candidate": runs[1]} | ({AA_PARTNER: aa[1]} if row.get(AA_PARTNER) else {})
    return [{side: got[i].get("wall_s") or 0.0 for side, got in sides.items() if i < len(got)}
            for i in range(row["rounds"]["ran"])]


def _key_diff(old: dict, new: dict) -> str:
    diff = [f"{k}: {old.get(k)!r} there, {v!r} now" if k != "code" else "the code of fk or of a plugin changed"
            for k, v in new.items() if old.get(k) != v]
    return "; ".join(diff) or "no run key"
