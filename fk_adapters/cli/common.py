"""What several subcommands share: scenario selection, the device, the engine's checks."""
from __future__ import annotations

import os

from fk_adapters import scenarios, user_cache
from fk_adapters.cli.errors import UsageError


def engine_names(conj: str = "or") -> str:
    """The engines fk drives, for help texts and messages: 'vllm, sglang or transformers'."""
    from fk_adapters.engines import ENGINES

    *rest, last = ENGINES
    return f"{', '.join(rest)} {conj} {last}" if rest else last


def add_scenario_args(p) -> None:
    p.add_argument("--suite", help="a built-in suite (e.g. tiny)")
    p.add_argument("--scenario", action="append", default=[], help="a scenario name or .toml path (repeatable)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), help="override every scenario's dtype")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--model-cache", default=user_cache.default_model_cache(),
                   help="where seeded checkpoints are written and reused (%(default)s)")


def add_quick_args(p) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", dest="quick", action="store_const", const=scenarios.QUICK_DIV, default=0,
                   help=f"1/{scenarios.QUICK_DIV} of the throughput requests and one repeat of each (latency keeps its "
                        "repeats), for iteration")
    g.add_argument("--smoke", dest="quick", action="store_const", const=scenarios.SMOKE_DIV,
                   help=f"1/{scenarios.SMOKE_DIV} of the throughput requests and one repeat of each: does it serve, "
                        "what does it touch")


def chosen_scenarios(args, engine_names: list[str]) -> list[scenarios.Scenario]:
    """The scenarios of --suite and --scenario, with --dtype applied.

    A --scenario that one of the engines cannot serve is an error; suite members that none of
    them can serve are left out, with a line saying so.
    """
    if not args.suite and not args.scenario:
        raise UsageError("give --suite NAME or --scenario NAME_OR_PATH")
    chosen = []
    for sc in scenarios.load_suite(args.suite) if args.suite else []:
        reasons = _unrunnable(sc, engine_names)
        if reasons:
            print(f"  skipped {sc.name}: {reasons[0]}", flush=True)
        else:
            chosen.append(sc)
    for name in args.scenario:
        sc = scenarios.load(name)
        for e in engine_names:
            scenarios.check_runnable(sc, e)
        chosen.append(sc)
    if not chosen:
        raise UsageError(f"no scenario of suite {args.suite!r} runs in {', '.join(engine_names)}")
    for sc in chosen:
        sc.dtype = args.dtype or sc.dtype
    return chosen


def _unrunnable(sc: scenarios.Scenario, engine_names: list[str]) -> list[str]:
    out = []
    for e in engine_names:
        try:
            scenarios.check_runnable(sc, e)
        except scenarios.ScenarioError as exc:
            out.append(str(exc))
    return out


def device(choice: str) -> str:
    if choice != "auto":
        return choice
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def check_device(spec, device: str) -> None:
    if device not in spec.devices:
        raise UsageError(f"engine {spec.name} does not run on {device} here")


def add_integrity_arg(p) -> None:
    p.add_argument("--allow-modified-engine", action="store_true",
                   help="go on when the engine's files differ from its RECORD (fk doctor): reported as MODIFIED, "
                        "never as stock, and the verdict is not PASS")


def verify_engines(specs, allow: bool, reference: bool = False) -> dict:
    """{engine: engine_integrity.verify()} of each engine about to run, and of HF transformers (with its role) when it
    may make the float32 reference; before any starts. An engine that is not stock is refused unless ``allow``."""
    from fk_adapters import engine_integrity, engines

    out = {spec.name: engine_integrity.verify(spec) for spec in specs}
    if reference and "transformers" not in out:  # the engines' results name it in this role
        out["transformers"] = dict(engine_integrity.verify(engines.get("transformers")),
                                   role=engine_integrity.REFERENCE_ROLE)
    for name, entry in out.items():
        print(f"  engine files: {engine_integrity.summary(name, entry)}", flush=True)
    why = engine_integrity.refusal(out)
    if why and not allow:
        raise UsageError(why)
    return out


def kernels_in_engine(plugins: list[str], spec, device: str) -> tuple[dict, list[str]]:
    """select_kernels for ``plugins`` as the engine's processes will see them (loaded under its environment)."""
    from fk_adapters.plugins import load_plugins, select_kernels

    loaded = load_plugins(plugins, strict=True, engine=spec.name, device=device, env=spec.env(device))
    return select_kernels(loaded, spec.name, device)


def check_timeout(seconds: float) -> None:
    """--timeout must be a finite number of seconds above 0."""
    import math

    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"--timeout must be a number of seconds above 0, not {seconds:g}")


def check_writable_dir(path: str, flag: str = "--out", given: str = "") -> None:
    """UsageError unless the folder ``path`` can be made and written; what this made to find out is removed again.
    The message names ``flag`` and ``given`` (what the user gave, default ``path``)."""
    import tempfile

    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a file, not a folder")
    made, head = [], os.path.abspath(path)
    while not os.path.exists(head):
        made.append(head)
        head = os.path.dirname(head)
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UsageError(f"{flag} {given or path}: cannot write there ({exc.strerror or exc})") from None
    finally:
        for d in made:  # deepest first
            try:
                os.rmdir(d)
            except OSError:
                break


def check_writable_file(path: str, flag: str) -> None:
    """UsageError unless the file ``path`` can be written (its folder made and written, and it is no folder)."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a folder, not a file")
    check_writable_dir(os.path.dirname(os.path.abspath(path)), flag, given=path)


def read_json(path: str, what: str):
    """The JSON in ``path``; a missing, unreadable or non-JSON file is a UsageError naming ``what`` and the file."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        why = "no such file" if isinstance(exc, FileNotFoundError) else exc.strerror or exc
        raise UsageError(f"cannot read {what} {path}: {why}") from None
    except ValueError as exc:  # not JSON, or not text at all
        raise UsageError(f"{what} {path} is not JSON ({exc})") from None


def command_line() -> str:
    """This invocation as the user typed it, for reports."""
    import shlex
    import sys

    return "fk " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def plots_section(out: str, results: dict, kind: str | None = None, floor: float | None = None) -> str:
    """The PNG plots of ``results`` written into ``out``, as a markdown section linking them ('' if none)."""
    from fk_adapters import plots

    try:
        names = plots.write_plots(results, out, kind, floor=floor)
    except ImportError as exc:  # matplotlib missing: the report still stands without its plots
        return f"\n## Plots\n\nnot drawn: {exc}\n"
    if not names:
        return ""
    return "\n## Plots\n\n" + "\n".join(plots.markdown_images(names)) + "\n"


def write_report(out: str, results: dict) -> None:
    """report.md beside results.json (fk run or fk check results), and the verdict line."""
    from fk_adapters.report import render

    md_path = os.path.join(out, "report.md")
    with open(md_path, "w") as f:
        f.write(render(results) + plots_section(out, results))
    print(f"{results['verdict']}: results {os.path.join(out, 'results.json')}, report {md_path}")

