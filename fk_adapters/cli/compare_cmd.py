"""``fk compare``: the diff between two fk run results files, as a pull-request comment, JSON or CSV."""
from __future__ import annotations

import json
import os
import sys

from fk_adapters.cli import common
from fk_adapters.cli.errors import UsageError
from fk_adapters.results import Verdict


def add_parser(sub):
    p = sub.add_parser("compare", help="compare two fk run results (e.g. main vs. a PR's kernel): markdown, JSON or "
                                       "CSV; exit 1 on a significant regression or a correctness failure")
    p.add_argument("base", metavar="BASE.json", help="results.json of the reference run (e.g. main)")
    p.add_argument("head", metavar="HEAD.json", help="results.json of the run under review (e.g. the PR)")
    p.add_argument("--threshold", type=float, default=0.02,
                   help="smallest relative change that counts as a regression or a gain (%(default)s = 2%%)")
    p.add_argument("--max-margin", type=float, default=0.10,
                   help="the largest regression a 'no change' may leave possible: a delta whose interval reaches "
                        "past it is 'too noisy' and the comparison INCOMPLETE (%(default)s = 10%%)")
    floor = p.add_mutually_exclusive_group()
    floor.add_argument("--noise-floor", type=float, metavar="X",
                       help="the machine's noise floor as a relative half-width (e.g. 0.03)")
    floor.add_argument("--aa", metavar="AA_RESULTS.json", help="results.json of an fk run --aa on this machine: "
                                                               "the noise floor is derived from it")
    p.add_argument("--out", metavar="DIR", help="also write compare.md, compare.json and compare.csv here")
    p.add_argument("--format", choices=("md", "json", "csv"), default="md", help="what to print (%(default)s)")
    return p


def run(args) -> int:
    from fk_adapters import compare as cmp_mod

    if args.out:
        common.check_writable_dir(args.out)
    base, head = common.read_json(args.base, "BASE"), common.read_json(args.head, "HEAD")
    try:
        floor = args.noise_floor
        if args.aa:
            floor = cmp_mod.noise_floor_from_aa(common.read_json(args.aa, "A/A"), args.aa)
        cmp = cmp_mod.compare(base, head, threshold=args.threshold, noise_floor=floor, base_path=args.base,
                              head_path=args.head, max_margin=args.max_margin)
    except cmp_mod.CompareError as exc:
        raise UsageError(str(exc)) from None
    docs = write(args.out, cmp) if args.out else documents(cmp)
    if args.out:
        print(f"{cmp['verdict']}: wrote compare.md, compare.json, compare.csv to {args.out}", file=sys.stderr)
    sys.stdout.write(docs[args.format])
    return 0 if cmp["verdict"] == Verdict.PASS else 1


def documents(cmp: dict) -> dict[str, str]:
    """A comparison as markdown, JSON and CSV, by format."""
    from fk_adapters import compare_report

    return {"md": compare_report.to_markdown(cmp), "json": json.dumps(cmp, indent=1, default=str) + "\n",
            "csv": compare_report.to_csv(cmp)}


def write(out: str, cmp: dict) -> dict[str, str]:
    """``documents`` written to compare.md (with its plots beside it), compare.json and compare.csv in ``out``."""
    docs = documents(cmp)
    os.makedirs(out, exist_ok=True)
    docs["md"] += common.plots_section(out, cmp, "compare")  # deltas.png beside compare.md
    for fmt, text in docs.items():
        with open(os.path.join(out, f"compare.{fmt}"), "w") as f:
            f.write(text)
    return docs
