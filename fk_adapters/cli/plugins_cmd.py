"""``fk plugins``: installed kernel plugins, their versions, slots, engines and load errors."""
from __future__ import annotations

import json


def add_parser(sub):
    p = sub.add_parser("plugins", help="list installed kernel plugins and what they provide")
    p.add_argument("--plugins", help="only these plugins (comma separated; default: $FK_PLUGINS or all installed)")
    p.add_argument("--strict", action="store_true", help="fail on the first plugin that does not load")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="device to ask the plugins about")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def run(args) -> int:
    from tabulate import tabulate

    from fk_adapters.plugins import allowlist_from_env, load_plugins, parse_allowlist, strict_from_env

    allow = parse_allowlist(args.plugins) if args.plugins is not None else allowlist_from_env()
    loaded = load_plugins(allow, strict=args.strict or strict_from_env(), device=args.device)
    if args.json:
        print(json.dumps([p.describe() for p in loaded], indent=1))
        return 1 if any(p.error for p in loaded) else 0
    if not loaded:
        print("no fk kernel plugins installed (entry-point group 'fk_adapters')")
        return 0
    rows = []
    for p in loaded:
        if p.error:
            rows.append([p.name, f"{p.dist} {p.version}", "-", "-", "-", f"LOAD ERROR: {p.error}"])
        for k in p.kernels:
            claims = (("graph-safe", k.cuda_graph_safe), ("compile-safe", k.compile_safe))
            flags = ", ".join(f for f, on in claims if on)
            rows.append([p.name, f"{p.dist} {p.version}", k.slot, ",".join(k.engines),
                         ",".join(k.dtypes) + " on " + ",".join(k.devices), flags or "eager only"])
        if not p.error and not p.kernels:
            rows.append([p.name, f"{p.dist} {p.version}", "-", "-", "-", f"no kernels for device {args.device}"])
    print(tabulate(rows, headers=["plugin", "distribution", "slot", "engines", "dtypes / devices", "flags"]))
    return 1 if any(p.error for p in loaded) else 0
