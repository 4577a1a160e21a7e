"""``fk coverage``: the measured slot coverage matrix, from fk capture workload files."""
from __future__ import annotations

import json
import os

from fk_adapters.cli import common
from fk_adapters.cli.errors import UsageError


def add_parser(sub):
    p = sub.add_parser("coverage", help="which slots each scenario's run exercised, and where the catalog should grow")
    p.add_argument("--results", action="append", default=None, metavar="DIR",
                   help="where to look for fk capture workload files and profiled fk run results "
                        "(repeatable; default: reports)")
    p.add_argument("--out", help="write coverage.md and coverage.json into this directory (default: print markdown)")
    return p


def run(args) -> int:
    from fk_adapters import coverage

    if args.out:
        common.check_writable_dir(args.out)
    roots = args.results or ["reports"]
    captures, served = coverage.collect(roots), coverage.collect_served(roots)
    if not captures and not served:
        raise UsageError(f"no fk capture workload file nor profiled fk run under {', '.join(roots)} "
                         "(run fk capture first)")
    text, data = coverage.render(captures, common.command_line(), served)
    if not args.out:
        print(text, end="")
        return 0
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "coverage.json"), "w") as f:
        json.dump(data, f, indent=1)
    with open(os.path.join(args.out, "coverage.md"), "w") as f:
        f.write(text)
    print(f"wrote {os.path.join(args.out, 'coverage.md')} ({len(captures)} capture(s), {len(served)} profiled run(s))")
    return 0
