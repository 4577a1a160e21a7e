"""``fk``: entry point and error handling shared by every subcommand."""
from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading

from fk_adapters import __version__
from fk_adapters.cli import (
    capture_cmd,
    check_cmd,
    compare_cmd,
    coverage_cmd,
    doctor_cmd,
    plugins_cmd,
    report_cmd,
    run_cmd,
    scenarios_cmd,
    slots_cmd,
)
from fk_adapters.cli.errors import Stopped, UsageError

COMMANDS = (plugins_cmd, slots_cmd, scenarios_cmd, run_cmd, capture_cmd, coverage_cmd, check_cmd, report_cmd,
            compare_cmd, doctor_cmd)


def _stop(signum, frame):
    raise Stopped(signum)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def user_errors() -> tuple[type[BaseException], ...]:
    from fk_adapters.doctor import DoctorError
    from fk_adapters.engines import EngineError
    from fk_adapters.runner.reuse import BaselineMismatch
    from fk_adapters.scenarios import ScenarioError
    from fk_adapters.weights import WeightsError

    try:
        from fk_adapters.plugins import PluginLoadError
    except ModuleNotFoundError:  # no pluggy: fk_adapters.plugins never loaded, so it raised no PluginLoadError
        PluginLoadError = UsageError
    return (UsageError, DoctorError, EngineError, PluginLoadError, ScenarioError, WeightsError, BaselineMismatch,
            FileNotFoundError, json.JSONDecodeError, IsADirectoryError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fk",
                                     description="Prove GPU kernels inside real, unmodified inference engines.")
    parser.add_argument("--version", action="version", version=f"fk-adapters {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for mod in COMMANDS:
        mod.add_parser(sub).set_defaults(func=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with _stopping_on(STOP_SIGNALS):
        return _run(args)


@contextlib.contextmanager
def _stopping_on(signals):
    """Turn ``signals`` into ``Stopped`` while fk runs (main thread only), then restore their handlers. A signal fk
    was started with ignored stays ignored (``nohup fk run ...`` outlives its terminal's SIGHUP)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.signal(sig, _stop) for sig in signals if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _run(args) -> int:
    try:
        return int(args.func(args) or 0)
    except ModuleNotFoundError as exc:  # before user_errors(), whose imports need the same dependencies
        missing = (exc.name or "").split(".")[0]
        if missing in ("", "fk_adapters"):  # a bug of ours, not a missing install
            raise
        print(f"fk {args.command}: error: missing dependency '{missing}': install fk-adapters "
              "(make setup, or pip install -e .)", file=sys.stderr)
        return 2
    except user_errors() as exc:
        msg = str(exc) if not isinstance(exc, FileNotFoundError) else f"no such file: {exc.filename or exc}"
        print(f"fk {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `fk slots | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(f"fk {args.command}: interrupted", file=sys.stderr)
        return 130
    except Stopped as exc:
        print(f"fk {args.command}: stopped by {exc}", file=sys.stderr)
        return 128 + exc.signum


if __name__ == "__main__":
    sys.exit(main())
