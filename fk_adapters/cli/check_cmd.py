"""``fk check``: each plugin kernel against the engine's own kernel, on captured shapes."""
from __future__ import annotations

import json
import os

from fk_adapters import engines
from fk_adapters.cli import common
from fk_adapters.cli.errors import UsageError
from fk_adapters.engine_integrity import describe, problems
from fk_adapters.results import Verdict


def add_parser(sub):
    p = sub.add_parser("check", help="op-level correctness and timing of plugin kernels vs. the engine's kernels")
    p.add_argument("--engine", default="vllm",
                   help=f"whose kernels to compare against: {common.engine_names()} (%(default)s)")
    p.add_argument("--plugins", required=True, help="plugins to check, comma separated")
    p.add_argument("--workload", action="append", default=[], metavar="JSON",
                   help="a workload file written by fk capture (repeatable)")
    p.add_argument("--scenario", action="append", default=[],
                   help="use <workloads-dir>/<scenario>/<engine>.json (repeatable)")
    p.add_argument("--workloads-dir", default="workloads", help="where fk capture wrote its files (%(default)s)")
    p.add_argument("--slots", help="only these slots, comma separated")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--mode", choices=("eager", "compiled"),
                   help="the engine mode whose end-to-end delta the report predicts (as fk run's --mode); default: "
                        "fk run's, compiled on cuda for vLLM, else eager (SGLang: eager only)")
    p.add_argument("--rounds", type=int, default=3, help="correctness rounds on fresh inputs per shape (%(default)s)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls per kernel and shape (%(default)s)")
    p.add_argument("--repeats", type=int, default=50, help="timed calls per kernel and shape (%(default)s)")
    p.add_argument("--max-shapes", type=int, default=0,
                   help="per slot, only the N shapes with the most work: calls x bytes of their inputs (0: all)")
    p.add_argument("--flag-speedup", type=float, default=2.0, help="flag speedups above this for review (%(default)s)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per (plugin, slot) process (%(default)s)")
    p.add_argument("--out", default="reports/check-latest", help="directory for results.json and report.md")
    common.add_integrity_arg(p)
    return p


def load_workload(path: str) -> dict:
    from fk_adapters.check.signature import validate
    from fk_adapters.tasks import SLOTS

    wl = common.read_json(path, "workload")
    if not isinstance(wl, dict) or not isinstance(wl.get("slots"), dict):
        raise UsageError(f"{path} is not a workload file (no 'slots'; write one with fk capture)")
    for slot, sigs in wl["slots"].items():
        if slot not in SLOTS:
            raise UsageError(f"{path}: unknown slot {slot!r}")
        for s in sigs:
            try:
                validate(SLOTS[slot], s["args"])
            except (ValueError, KeyError, TypeError) as exc:
                raise UsageError(f"{path}: bad signature for {slot}: {exc}") from None
    wl["path"] = path
    return wl


def _check_counts(args) -> None:
    for flag, value, least in (("--rounds", args.rounds, 1), ("--repeats", args.repeats, 1),
                               ("--warmup", args.warmup, 0), ("--max-shapes", args.max_shapes, 0)):
        if value < least:
            raise UsageError(f"{flag} must be at least {least}, not {value}")


def _mode(args, engine: str, device: str) -> str:
    from fk_adapters.check import compiled

    if args.mode is None:
        return compiled.default_mode(engine, device)
    if args.mode == "compiled" and engine not in compiled.ENGINES:
        raise UsageError(f"--mode compiled: {compiled.no_compile_plan(engine).why}; fk check judges it eager")
    return args.mode


def run(args) -> int:
    from fk_adapters.check.runner import run_check
    from fk_adapters.plugins import parse_allowlist

    spec = engines.get(args.engine)
    device = common.device(args.device)
    common.check_device(spec, device)
    common.check_timeout(args.timeout)
    _check_counts(args)
    mode = _mode(args, spec.name, device)
    common.check_writable_dir(args.out)
    paths = list(args.workload) + [os.path.join(args.workloads_dir, s, f"{spec.name}.json") for s in args.scenario]
    if not paths:
        raise UsageError("give --workload FILE or --scenario NAME (write workloads with fk capture)")
    workloads = [load_workload(p) for p in paths]
    if args.slots:
        keep = set(parse_allowlist(args.slots))
        for wl in workloads:
            wl["slots"] = {s: v for s, v in wl["slots"].items() if s in keep}
    plugins = parse_allowlist(args.plugins) or []
    plugin_slots = {}
    for name in plugins:
        plugin_slots[name] = sorted(common.kernels_in_engine([name], spec, device)[0])
    version = engines.check_installed(spec)
    integrity = common.verify_engines([spec], args.allow_modified_engine)
    config = {"rounds": args.rounds, "warmup": args.warmup, "repeats": args.repeats, "flag_speedup": args.flag_speedup,
              "mode": mode}
    print(f"fk check: {', '.join(plugins)} vs. {describe(spec.name, integrity[spec.name], version)} kernels "
          f"on {device}, {mode} mode judged, {len(workloads)} workload(s) -> {args.out}", flush=True)
    results = run_check(spec, plugin_slots, workloads, device, args.out, config, args.timeout, args.max_shapes,
                        command=common.command_line(), engine_version=version,
                        echo=lambda m: print(f"  {m}", flush=True))
    _add_integrity(args.out, results, integrity)
    common.write_report(args.out, results)
    return 0 if results["verdict"] == Verdict.PASS else 1


def _add_integrity(out: str, results: dict, integrity: dict) -> None:
    """Which engine files the kernels compared against came from; a MODIFIED engine's are not its own: FAIL."""
    results["engine_integrity"] = integrity
    results["problems"] = results.get("problems", []) + problems(integrity)
    if results["problems"]:
        results["verdict"] = Verdict.FAIL
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
