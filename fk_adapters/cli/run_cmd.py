"""``fk run``: a scenario suite on an engine, baseline vs. candidate, to results JSON + markdown."""
from __future__ import annotations

import json
import os
import time

from fk_adapters import cpu_binding, engines, scenarios, variation
from fk_adapters.cli import common
from fk_adapters.cli.errors import UsageError
from fk_adapters.engine_integrity import REFERENCE_ROLE, describe
from fk_adapters.results import Verdict
from fk_adapters.runner.ab import RunConfig, run_suite
from fk_adapters.runner.reference import HALF_DTYPES, TRANSFORMERS
from fk_adapters.runner.reuse import ResumeMismatch
from fk_adapters.variation import MIN_ROUNDS


def add_parser(sub):
    p = sub.add_parser("run", help="run scenarios baseline vs. candidate and report the diff")
    p.add_argument("--engine", action="append",
                   help=f"engine: {common.engine_names()} (default vllm); repeat for several: one report puts them "
                        "side by side")
    p.add_argument("--plugins", help="candidate plugins, comma separated (default: $FK_PLUGINS)")
    p.add_argument("--aa", action="store_true", help="A/A: the candidate is a second baseline (noise floor)")
    common.add_scenario_args(p)
    p.add_argument("--mode", choices=("eager", "compiled"), help="default: eager on cpu, compiled on cuda")
    p.add_argument("--out", default="reports/latest", help="directory for results.json, report.md, logs/ (%(default)s)")
    p.add_argument("--baseline-from", default="", metavar="DIR",
                   help="reuse the baseline runs of an earlier fk run's --out DIR (same scenarios and job)")
    p.add_argument("--reference-from", default="", metavar="DIR",
                   help="reuse the float32 reference run (bf16/fp16 runs that fail the fixed thresholds need one) of "
                        "an earlier fk run's --out DIR, when it made one for the same job (e.g. the A/A run before a "
                        "series of plugin runs); otherwise fk's reference store's, else it runs again")
    p.add_argument("--fresh-reference", action="store_true",
                   help="make the float32 reference again (and keep it) even where fk's reference store "
                        "(FK_CACHE_HOME/references) holds one for the same job, engine files and device")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per engine run before it is killed")
    p.add_argument("--interleave", type=int, default=None, metavar="N",
                   help="N rounds of baseline and candidate (A B, B A, A B, ...), each in a fresh engine process; the "
                        f"ratios pair round by round, with an interval from {MIN_ROUNDS} rounds on (N >= 2; default on "
                        f"a GPU: {MIN_ROUNDS}, without --baseline-from; elsewhere one process per side, no interval)")
    p.add_argument("--with-aa", action="store_true",
                   help="with --interleave: a second stock process in every round (A B A', B A' A, ...: every place "
                        "and order in turn), so the same rounds also give the A/A, the noise floor the candidate's "
                        "deltas are judged against (OUT/aa/results.json and report.md; OUT/compare-aa/: fk compare "
                        "of the candidate against it): one process a round more instead of a second run of its own")
    p.add_argument("--time-budget", type=float, default=0.0, metavar="SECONDS",
                   help="with --interleave: seconds this fk run may take (e.g. what is left of a machine hold); no "
                        "later round starts that would end past it (as long as round 1, later the longest warm round); "
                        "the rounds that ran are judged; the same command into the same --out later runs the rest")
    p.add_argument("--gpus", nargs="+", default=(), metavar="DEVICES",
                   help="CUDA device sets (CUDA_VISIBLE_DEVICES values, e.g. 0 1 2 3, or 0,1 2,3 for TP=2): with "
                        "--interleave, round 1 runs on the first, later rounds side by side, one set each; without, "
                        "a suite's scenarios run side by side, one a set (both sides of a scenario on its set)")
    p.add_argument("--force", action="store_true",
                   help="run every scenario again, even those an interrupted earlier run finished in --out")
    _add_timing_args(p)
    p.add_argument("--profile", action=argparse_bool(), default=None,
                   help="profile a few steps for kernel names (default: on for cuda)")
    p.add_argument("--no-multiprocessing", action="store_true",
                   help="run the engine core in the driver process (faster start on CPU)")
    p.add_argument("--strict", action="store_true", help="a plugin that fails to load fails the run")
    p.add_argument("--allow-unexercised", action="store_true",
                   help="do not fail when the model has layers for a selected slot but its kernel never ran "
                        "(still reported)")
    p.add_argument("--allow-uncovered", action="store_true",
                   help="do not fail when no scenario's model has a layer for a selected slot (still reported)")
    common.add_integrity_arg(p)
    return p


def _add_timing_args(p) -> None:
    """What each engine process times: how many requests and repeats, how long a warm-up, or nothing."""
    common.add_quick_args(p)
    p.add_argument("--repeats", type=int, default=0, metavar="N",
                   help="timed repeats of each workload in every engine process (default: the scenario's, 1 under "
                        "--quick / --smoke for throughput: latency runs are short and keep theirs); each process "
                        "counts once, by its median, so with --interleave the rounds carry the interval and one "
                        "repeat may do (a full-size run fits a hold sooner)")
    p.add_argument("--warmup-share", type=float, default=1.0, metavar="F",
                   help="the untimed warm-up pass before each throughput workload serves only its first F of the "
                        "requests (0 < F <= 1; default 1: all). A timed repeat during which a Triton kernel compiled "
                        "is run again, so a shape the shorter warm-up missed costs a repeat, not a wrong timing; "
                        "for full-size runs, whose warm-up pass is as long as a timed one")
    p.add_argument("--workloads", type=scenarios.parse_workloads, default=(), metavar="NAMES",
                   help="time only these workloads, comma separated: a kind (throughput, latency), a name "
                        "(batch32) or both (latency:batch32); each keeps the requests of the whole run, the other "
                        "workloads are left out: more rounds of a workload `fk compare` found too noisy fit a hold. "
                        "A run of some workloads claims no FastKernels score")
    p.add_argument("--correctness-only", action="store_true",
                   help="judge correctness alone: no throughput or latency phases (e.g. to show quickly that a wrong "
                        "kernel fails); the report says no speed was measured")


def argparse_bool():
    import argparse

    return argparse.BooleanOptionalAction


def _refuse_before_start(plugins: list[str], spec, device: str, mode: str, chosen_scenarios) -> None:
    """Same rules the engine adapters enforce, and what the kernels' own declarations rule out, said before any
    engine starts."""
    from fk_adapters import preflight, safety

    if not plugins:
        return
    chosen, notes = common.kernels_in_engine(plugins, spec, device)
    if not chosen:
        raise UsageError(f"the selected plugins offer no kernel for {spec.name} on {device}"
                         + (f" ({'; '.join(notes)})" if notes else ""))
    unrunnable = preflight.dtype_problems(chosen, chosen_scenarios)
    if unrunnable:
        raise UsageError("; ".join(unrunnable))
    why = safety.refusals(chosen, *spec.modes(mode, device))
    if why:
        raise UsageError("; ".join(why) + " (use --mode eager)")


def _integrity_of(integrity: dict, engine: str, half: bool) -> dict:
    """The entries of one engine's run: its own, and HF transformers' when it may make the float32 reference."""
    out = {engine: integrity[engine]}
    if half and engine != TRANSFORMERS:
        out[TRANSFORMERS] = dict(integrity[TRANSFORMERS], role=REFERENCE_ROLE)
    return out


def _check_workloads(args, specs, chosen, mode: str) -> None:
    """--workloads must name at least one timed workload of every scenario, each name some scenario's."""
    if not args.workloads:
        return
    if args.correctness_only:
        raise UsageError("--workloads chooses timed workloads; --correctness-only times none")
    unused = set(args.workloads)
    for spec in specs:
        for sc in chosen:
            perf = scenarios.build_job(sc, "", mode, args.quick, engine=spec.name).get("perf") or {}
            names = scenarios.workload_names(perf)
            if not names:
                raise UsageError(f"--workloads: {sc.name} in {spec.name} times no throughput or latency workload "
                                 "(items per second): run it without --workloads")
            naming = scenarios.items_naming(perf, args.workloads)
            if not naming:
                raise UsageError(f"--workloads {','.join(args.workloads)} names none of {sc.name}'s workloads in "
                                 f"{spec.name}: {', '.join(names)}")
            unused -= naming
    if unused:
        raise UsageError(f"--workloads: {', '.join(sorted(unused))} names no workload of the chosen scenarios")


def _check_binding(device: str) -> None:
    if device == "cuda":  # CPU runs bind nothing
        try:
            cpu_binding.check(os.environ)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def run(args) -> int:
    specs = [engines.get(e) for e in dict.fromkeys(args.engine or ["vllm"])]
    plugins, loaded = _candidate(args)
    code = _code_of(loaded)
    chosen = common.chosen_scenarios(args, [s.name for s in specs])
    device = common.device(args.device)
    mode = args.mode or ("eager" if device == "cpu" else "compiled")
    if args.interleave is None:  # a GPU timing is a claim: measure the variation between engine processes
        args.interleave = MIN_ROUNDS if device == "cuda" and not (args.baseline_from or args.correctness_only) else 0
    if args.time_budget and (args.time_budget < 0 or not args.interleave):
        raise UsageError("--time-budget SECONDS (> 0) limits the rounds of --interleave N: give both")
    if args.with_aa and (args.aa or args.interleave < 2):
        raise UsageError("--with-aa adds a second stock process to each round of --interleave N (N >= 2) of a "
                         "candidate: " + ("--aa is already stock against stock" if args.aa else
                                          "give --interleave N (on a GPU the default is "
                                          f"{MIN_ROUNDS}, unless --baseline-from or --correctness-only)"))
    _check_gpu_sets(args.gpus, chosen)
    _check_workloads(args, specs, chosen, mode)
    _check_binding(device)
    if args.gpus and (device != "cuda" or (args.interleave < 2 and len({sc.name for sc in chosen}) < 2)):
        raise UsageError("--gpus spreads a CUDA run over device sets, either the interleaved rounds of each scenario "
                         "(--interleave N, N >= 2) or a suite's scenarios, one a set: it needs --device cuda and "
                         "--interleave N or 2 or more scenarios")
    versions = {}
    for spec in specs:  # every engine is checked before any starts
        common.check_device(spec, device)
        _refuse_before_start(plugins, spec, device, mode, chosen)
        versions[spec.name] = engines.check_installed(spec)
    half = any(sc.dtype in HALF_DTYPES for sc in chosen)  # a float32 reference run may follow
    integrity = common.verify_engines(specs, args.allow_modified_engine, reference=half)
    all_results = []
    for spec in specs:
        cfg = _config(args, spec, len(specs) > 1, plugins=plugins, device=device, mode=mode, code=code,
                      engine_integrity=_integrity_of(integrity, spec.name, half))
        print(f"fk run: {cfg.candidate_label} vs. {describe(spec.name, integrity[spec.name], versions[spec.name])} "
              f"on {device} ({spec.describe_mode(mode, device)}), "
              f"{len(chosen)} scenario(s) -> {cfg.out_dir}", flush=True)
        all_results.append(_run_suite(cfg, chosen, versions[spec.name]))
    if len(specs) > 1:
        all_results = [_combine(args.out, all_results, integrity)]
    return 0 if all(r["verdict"] == Verdict.PASS for r in all_results) else 1


def _check_gpus_visible(gpus, visible: str | None) -> None:
    """--gpus names physical GPUs (each engine process gets its set as CUDA_VISIBLE_DEVICES): under a narrower
    CUDA_VISIBLE_DEVICES, a set outside it would land on GPUs the caller kept out."""
    allowed = [d for d in (visible or "").replace(" ", "").split(",") if d]
    outside = [d for d in gpus if allowed and not set(d.split(",")) <= set(allowed)]
    if outside:
        raise UsageError(f"--gpus {' '.join(outside)}: outside CUDA_VISIBLE_DEVICES={visible}; --gpus takes the "
                         f"physical GPU numbers each engine process is given: name sets of them "
                         f"(e.g. --gpus {' '.join(allowed)})")


def _check_gpu_sets(gpus, chosen) -> None:
    """Every --gpus set must hold as many GPUs as each scenario's tensor-parallel size."""
    for sc in chosen:
        tp = int(sc.engine.get("tensor_parallel_size", 1))
        short = [d for d in gpus if len(d.split(",")) < tp]
        if short:
            raise UsageError(f"{sc.name} runs at tensor-parallel size {tp}: each --gpus set needs {tp} GPUs "
                             f"(e.g. 0,1 2,3), not {' '.join(short)}")


def _candidate(args) -> tuple[list[str], list]:
    """The candidate's plugins by name and loaded, after the flags are checked against each other; unknown or broken
    plugins stop here, before any engine starts."""
    from fk_adapters.plugins import allowlist_from_env, load_plugins, parse_allowlist

    if args.aa and args.plugins:
        raise UsageError("--aa runs baseline against baseline: give no --plugins")
    if args.interleave is not None and (args.interleave < 0 or args.interleave == 1):
        raise UsageError("--interleave N needs N >= 2 rounds (or leave it out)")
    if args.interleave and args.baseline_from:
        raise UsageError("--interleave runs its own baseline in every round: it cannot reuse --baseline-from")
    if args.interleave and args.correctness_only:
        raise UsageError("--interleave pairs timings round by round: --correctness-only times nothing")

    if args.repeats < 0 or (args.repeats and args.correctness_only):
        raise UsageError("--repeats N needs N >= 1, and a run that times something (not --correctness-only)")
    if not 0 < args.warmup_share <= 1 or (args.warmup_share < 1 and args.correctness_only):
        raise UsageError(f"--warmup-share F needs 0 < F <= 1 (got {args.warmup_share:g}), and a run that times "
                         "something (not --correctness-only)")
    if len(set(args.gpus)) != len(args.gpus) or any(not d.replace(",", "").isdigit() for d in args.gpus):
        raise UsageError(f"--gpus takes distinct device sets of GPU numbers (0 1, or 0,1 2,3): {' '.join(args.gpus)}")
    _check_gpus_visible(args.gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    common.check_timeout(args.timeout)
    common.check_writable_dir(args.out)
    if args.aa:
        return [], []
    plugins = parse_allowlist(args.plugins) if args.plugins is not None else allowlist_from_env() or []
    if not plugins:
        raise UsageError("no candidate: give --plugins NAME[,NAME] (see fk plugins) or --aa")
    return plugins, load_plugins(plugins, strict=True)


def _code_of(loaded: list) -> dict:
    """What code runs: fk's own source digest, and each plugin's with its info."""
    from fk_adapters.sources import source_digest

    return {"fk_adapters": source_digest("fk_adapters"),
            **{p.name: {"source_sha256": p.source_sha256, "info": p.info} for p in loaded}}


def _config(args, spec, multi: bool, **given) -> RunConfig:
    """One engine's RunConfig; where several engines run, each has its own subfolder of the folders given for all."""
    def own(folder: str) -> str:
        return os.path.join(folder, spec.name) if multi and folder else folder

    return RunConfig(engine=spec, out_dir=own(args.out), timeout_s=args.timeout, strict=args.strict,
                     allow_unexercised=args.allow_unexercised, allow_uncovered=args.allow_uncovered, aa=args.aa,
                     quick=args.quick, repeats=args.repeats, warmup_share=args.warmup_share, workloads=args.workloads,
                     correctness_only=args.correctness_only,
                     profile=given["device"] == "cuda" if args.profile is None else args.profile,
                     multiprocessing=not args.no_multiprocessing, model_cache=args.model_cache,
                     baseline_from=own(args.baseline_from), reference_from=own(args.reference_from),
                     fresh_reference=args.fresh_reference, with_aa=args.with_aa,
                     interleave=args.interleave, gpus=tuple(args.gpus), force=args.force,
                     stop_by=time.time() + args.time_budget if args.time_budget else 0.0,
                     command=common.command_line(), **given)


COMPARE_AA = "compare-aa"


def _run_suite(cfg: RunConfig, chosen, version: str) -> dict:
    """One engine's run of the suite, its report written beside its results."""
    try:
        results = run_suite(cfg, chosen, version, echo=lambda m: print(f"  {m}", flush=True))
    except ResumeMismatch as exc:
        raise UsageError(str(exc)) from None
    common.write_report(cfg.out_dir, results)
    if cfg.with_aa:
        _beside_aa(cfg.out_dir, results)
    return results


def _beside_aa(out: str, results: dict) -> None:
    """A --with-aa run's A/A of the same rounds: its report, and `fk compare` of the candidate against it (each
    delta judged against that floor) in OUT/compare-aa/."""
    from fk_adapters import compare
    from fk_adapters.cli import compare_cmd

    aa_path = os.path.join(out, results["with_aa"]["results"])
    aa = common.read_json(aa_path, "A/A")
    common.write_report(os.path.dirname(aa_path), aa)
    # under 3 rounds (--time-budget cut them) the A/A's reach is one or two pairs, no measure of the variation
    # between engine processes: no floor, so no delta is judged (INCOMPLETE), as without rounds
    enough = variation.between_processes(aa)
    try:
        cmp = compare.compare(aa, results, noise_floor=compare.noise_floor_from_aa(aa, aa_path) if enough else None,
                              base_path=aa_path, head_path=os.path.join(out, "results.json"))
    except compare.CompareError as exc:
        print(f"  the A/A of the same rounds could not judge the candidate's deltas: {exc}", flush=True)
        return
    if not enough:
        cmp["limitations"].insert(0, f"the A/A of the same rounds ran {variation.rounds(aa)} round(s), fewer than "
                                     f"{MIN_ROUNDS}: its reach is no noise floor, so no delta is judged")
    compare_cmd.write(os.path.join(out, COMPARE_AA), cmp)
    print(f"  candidate against the A/A of the same rounds: {cmp['verdict_line']} -> "
          f"{os.path.join(out, COMPARE_AA, 'compare.md')}", flush=True)


def _combine(out: str, all_results: list[dict], integrity: dict) -> dict:
    """The engines' results side by side in ``out``: PASS only where every engine's run passed."""
    from fk_adapters.results import Kind, stamp, verdict

    combined = {**stamp(Kind.RUNS), "engines": [r["engine"] for r in all_results],
                "candidate": all_results[0]["candidate"],
                "verdict": verdict.side_by_side([r["verdict"] for r in all_results]),
                "engine_integrity": integrity, "runs": all_results}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(combined, f, indent=1, default=str)
    common.write_report(out, combined)
    return combined
