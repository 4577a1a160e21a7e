"""``fk capture``: every distinct slot call an engine makes serving scenarios, to workload files."""
from __future__ import annotations

import sys

from fk_adapters import engines
from fk_adapters.capture import CaptureConfig, CaptureError, capture, record_failure
from fk_adapters.cli import common
from fk_adapters.cli.errors import UsageError
from fk_adapters.engine_integrity import describe
from fk_adapters.weights import WeightsError


def add_parser(sub):
    p = sub.add_parser("capture", help="record the slot call signatures an engine makes serving scenarios")
    p.add_argument("--engine", help=f"the engine to capture from: {common.engine_names()}")
    common.add_scenario_args(p)
    p.add_argument("--out", default="workloads", help="workload files go to OUT/<scenario>/<engine>.json (%(default)s)")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds for each engine run before it is killed")
    common.add_quick_args(p)
    p.add_argument("--profile", action="store_true",
                   help="also profile a batch (GPU): device time per kernel and per op family, in the workload file")
    common.add_integrity_arg(p)
    return p


def run(args) -> int:
    if not args.engine:
        raise UsageError(f"give --engine ({common.engine_names()})")
    common.check_timeout(args.timeout)
    common.check_writable_dir(args.out)
    spec = engines.get(args.engine)
    chosen = common.chosen_scenarios(args, [spec.name])
    device = common.device(args.device)
    common.check_device(spec, device)
    version = engines.check_installed(spec)
    integrity = common.verify_engines([spec], args.allow_modified_engine)
    cfg = CaptureConfig(engine=spec, device=device, out_dir=args.out, model_cache=args.model_cache,
                        timeout_s=args.timeout, quick=args.quick, profile=args.profile,
                        command=common.command_line(), engine_integrity=integrity)
    print(f"fk capture: {describe(spec.name, integrity[spec.name], version)} on {device}, "
          f"{spec.describe_mode('eager', device)}, {len(chosen)} scenario(s) -> {args.out}", flush=True)
    failed = 0
    for i, sc in enumerate(chosen, 1):
        print(f"  [{i}/{len(chosen)}] {sc.name}", flush=True)
        try:
            path, wl = capture(cfg, sc, echo=lambda m: print(f"  {m}", flush=True))
        except (CaptureError, WeightsError) as exc:  # this scenario fails; the others still run
            msg = str(exc) if isinstance(exc, CaptureError) else f"{sc.name}: {exc}"
            print(f"fk capture: error: {msg}", file=sys.stderr, flush=True)
            record_failure(cfg, sc, msg)
            failed += 1
            continue
        calls = wl["total_calls"]
        print(f"  [{i}/{len(chosen)}] {sc.name}: {sum(calls.values())} calls in {sum(1 for n in calls.values() if n)} "
              f"slot(s), {sum(len(v) for v in wl['slots'].values())} signature(s) -> {path}", flush=True)
    return 1 if failed else 0
