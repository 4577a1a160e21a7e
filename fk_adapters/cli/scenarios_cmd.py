"""``fk scenarios``: the scenarios (the 46 FastKernels architectures first), where each is hosted,
and what has been measured of it."""
from __future__ import annotations

import json

from fk_adapters import scenarios
from fk_adapters.cli import common
from fk_adapters.cli.errors import UsageError


def add_parser(sub):
    p = sub.add_parser("scenarios", help="list scenarios: the 46 architectures, their hosts, status and last figures")
    p.add_argument("--category", help="only categories containing this text (e.g. 'MoE', 'vision')")
    p.add_argument("--engine", help=f"only scenarios this host serves: {common.engine_names()}")
    p.add_argument("--family", help="only this family: " + ", ".join(scenarios.FAMILIES_OF_MODELS))
    p.add_argument("--all", action="store_true",
                   help="also the scenarios outside the 46 (tiny CPU variants, the GPU-sized Llama)")
    p.add_argument("--results", action="append", default=None, metavar="DIR",
                   help="where to look for fk run / fk capture results (repeatable; default: reports)")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def _pending(sc: scenarios.Scenario, host: str) -> str:
    """What a host with no result yet means: still to run, or a model fk cannot drive in that host."""
    try:
        scenarios.check_runnable(sc, host)
    except scenarios.ScenarioError as exc:
        return f"not driven by fk ({exc})"
    return "not run yet"


def _scope(sc: scenarios.Scenario, host: str) -> str:
    """How much of a multimodal model fk serves: vLLM builds the language model alone (the scenario's flag);
    SGLang builds the towers but, with multimodal input off, never calls them."""
    if not (sc.engine or {}).get("language_model_only"):
        return ""
    return {"vllm": " (language model only)", "sglang": " (text only)"}.get(host, "")


def _status(sc: scenarios.Scenario, seen: dict) -> tuple[str, list[str], bool]:
    """The status line, the last figures, and whether any host has a result that ran."""
    if not sc.hosts:
        return f"not hosted: {sc.catalog.get('not_hosted', '')}", [], False
    parts, figures, ran = [], [], False
    for host in sc.hosts:
        s = seen.get((sc.name, host))
        scope = _scope(sc, host)
        ran = ran or bool(s and s.status == "runs")
        parts.append(f"{host}: {s.status if s and s.status else _pending(sc, host)}{scope}")
        if s:
            figures += [f"{host}: {f}" for f in s.figures]
            if s.slots:
                figures.append(f"{host} slots: " + ", ".join(f"{k} x{v}" for k, v in s.slots.items() if v))
    return "; ".join(parts), figures, ran


def _summary(rows: list[dict]) -> str:
    """One line over the architectures listed (a catalog number counts once, however many scenarios it has)."""
    arch: dict = {}
    for r in rows:
        if r["number"] is not None:
            hosted, ran = arch.get(r["number"], (False, False))
            arch[r["number"]] = (hosted or bool(r["hosts"]), ran or r["runs"])
    hosted = sum(h for h, _ in arch.values())
    ran = sum(r for _, r in arch.values())
    return (f"{len(arch)} architecture(s) listed: {hosted} hosted ({ran} with a result that ran, among the results "
            f"read), {len(arch) - hosted} not hosted")


def run(args) -> int:
    from tabulate import tabulate

    from fk_adapters import scenario_status

    if args.engine and args.engine not in scenarios.HOSTS:
        raise UsageError(f"unknown host {args.engine!r} (hosts: {', '.join(scenarios.HOSTS)})")
    if args.family and args.family not in scenarios.FAMILIES_OF_MODELS:
        raise UsageError(f"unknown family {args.family!r} (families: {', '.join(scenarios.FAMILIES_OF_MODELS)})")
    chosen = [scenarios.load(n) for n in scenarios.builtin_names()]
    chosen = [s for s in chosen if args.all or "fk46" in s.suites]
    if args.category:
        chosen = [s for s in chosen if args.category.lower() in s.catalog.get("category", "").lower()]
    if args.engine:
        chosen = [s for s in chosen if args.engine in s.hosts]
    if args.family:
        chosen = [s for s in chosen if s.family == args.family]
    chosen.sort(key=lambda s: (s.catalog.get("number", 99), s.name))
    seen = scenario_status.collect(args.results or ["reports"])
    rows = []
    for sc in chosen:
        status, figures, ran = _status(sc, seen)
        c = sc.catalog
        rows.append({"number": c.get("number"), "scenario": sc.name, "category": c.get("category", "-"),
                     "architecture": c.get("architecture", "-"), "checkpoint": c.get("checkpoint", "-"),
                     "hosts": sc.hosts, "family": sc.family,
                     "layers": f"{c['layers']['here']}/{c['layers']['full']}" if c.get("layers") else
                     str(sc.model.get("num_hidden_layers", "-")),
                     "status": status, "figures": figures, "runs": ran})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print("no scenario matches")
        return 0
    print(tabulate([[r["number"] or "-", r["scenario"], r["category"], r["architecture"], ",".join(r["hosts"]) or "-",
                     r["layers"], r["status"], "; ".join(r["figures"]) or "-"] for r in rows],
                   headers=["#", "scenario", "category", "architecture", "hosts", "layers", "status", "last figures"],
                   tablefmt="github"))
    print(_summary(rows))
    return 0
