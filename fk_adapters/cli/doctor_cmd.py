"""``fk doctor``: engine version, device, and proof that the installed engine is unmodified."""
from __future__ import annotations

import json
import subprocess

from fk_adapters import engines
from fk_adapters.cli import common


def add_parser(sub):
    p = sub.add_parser("doctor", help="check the engine install (files vs. RECORD) and the device")
    p.add_argument("--engine", default="vllm", help=f"engine to check: {common.engine_names()} (%(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def run(args) -> int:
    spec = engines.get(args.engine)
    engines.check_installed(spec)
    code = ("import json; from fk_adapters.doctor import doctor, DoctorError\n"
            f"try: print(json.dumps(doctor({spec.module!r})))\n"
            "except DoctorError as e: print(json.dumps({'error': str(e)}))")
    p = subprocess.run([spec.python, "-c", code], capture_output=True, text=True, env=spec.process_env())
    if p.returncode != 0:
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
        raise engines.EngineError(f"could not run the check in {spec.python}: {last}")
    report = json.loads(p.stdout.strip().splitlines()[-1])
    if "error" in report:
        raise engines.EngineError(f"{args.engine}: {report['error']}")
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        from fk_adapters.doctor import render

        print(render(report))
    return 0 if report["record"]["unmodified"] else 1
