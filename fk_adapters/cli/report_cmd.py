"""``fk report``: render a results JSON to markdown."""
from __future__ import annotations

import os

from fk_adapters.cli.common import check_writable_file, plots_section, read_json
from fk_adapters.cli.errors import UsageError


def add_parser(sub):
    p = sub.add_parser("report", help="render a results JSON (from fk run or fk check) as markdown")
    p.add_argument("results", help="results.json written by fk run")
    p.add_argument("-o", "--output", help="write the markdown here, with its plots drawn beside it (default: print it)")
    return p


def load_results(path: str) -> dict:
    from fk_adapters.results import Kind, kind_of

    data = read_json(path, "results file")
    if kind_of(data) not in (Kind.RUN, Kind.RUNS, Kind.CHECK):
        raise UsageError(f"{path} is not an fk run or check results file")
    return data


def run(args) -> int:
    from fk_adapters.report import render

    results = load_results(args.results)
    if args.output:
        check_writable_file(args.output, "-o")
    md = render(results)
    if args.output:
        md += plots_section(os.path.dirname(os.path.abspath(args.output)), results)
        with open(args.output, "w") as f:
            f.write(md)
        print(f"wrote {args.output}")
    else:
        print(md)
    return 0
