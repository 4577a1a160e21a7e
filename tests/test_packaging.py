"""Running from a source checkout, and pyproject files that build on the setuptools they declare."""
import argparse
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECTS = [ROOT / "pyproject.toml", *sorted(ROOT.glob("plugins/*/pyproject.toml"))]
PROBE = """
import importlib, sys
from fk_adapters.scenarios import builtin_names
for name in sys.argv[1:]:
    print(name, importlib.import_module(name).__file__)
print("scenarios", len(builtin_names()))
"""


def _package_dirs() -> dict[str, str]:
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: folder for name, folder in setup["package-dir"].items() if name != folder}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of the source tree, as a fresh clone has it (no install, no build output)."""
    dest = tmp_path_factory.mktemp("clone")
    for folder in ("fk_adapters", *_package_dirs().values()):
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest)
    return dest


def _python_in(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    """Python started in `checkout` with the venv's packages but without site (-S): no .pth file runs, so the
    editable install's import finder, which would map fk_adapters.tasks to this repository, is not loaded."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(site.getsitepackages())}
    return subprocess.run([sys.executable, "-S", *args], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=300)


def _stdlib_python_in(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    """Python started in `checkout` with the standard library only, as before anything is installed."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-S", *args], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=300)


def _subcommands() -> list[str]:
    from fk_adapters.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(sub.choices)


def test_cli_help_runs_from_the_checkout_root(checkout):
    done = _python_in(checkout, "-m", "fk_adapters.cli.main", "--help")
    assert done.returncode == 0, done.stderr
    assert "usage: fk" in done.stdout


@pytest.mark.parametrize("command", ["", *_subcommands()], ids=lambda c: c or "fk")
def test_cli_help_needs_only_the_standard_library(checkout, command):
    done = _stdlib_python_in(checkout, "-m", "fk_adapters.cli.main", *command.split(), "--help")
    assert done.returncode == 0, done.stderr
    assert f"usage: fk {command}".strip() in done.stdout


@pytest.mark.parametrize("command", ["slots", "plugins"])
def test_a_missing_dependency_is_one_line_and_exit_2(checkout, command):
    done = _stdlib_python_in(checkout, "-m", "fk_adapters.cli.main", command)
    assert done.returncode == 2, done.stderr
    assert re.fullmatch(rf"fk {command}: error: missing dependency '\w+': install fk-adapters "
                        r"\(make setup, or pip install -e \.\)\n", done.stderr), done.stderr


def test_a_user_error_is_one_line_and_exit_2_without_dependencies(checkout):
    done = _stdlib_python_in(checkout, "-m", "fk_adapters.cli.main", "capture")
    from fk_adapters.cli.common import engine_names

    assert (done.returncode, done.stderr) == (2, f"fk capture: error: give --engine ({engine_names()})\n")


def test_relocated_subpackages_and_scenario_files_come_from_the_checkout(checkout):
    names = sorted(_package_dirs())
    done = _python_in(checkout, "-c", PROBE, *names)
    assert done.returncode == 0, done.stderr
    found = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    for name, folder in _package_dirs().items():
        assert Path(found[name]) == checkout / folder / "__init__.py"
    assert int(found["scenarios"]) == len(list((ROOT / "scenarios").glob("*.toml"))) > 0


def _min_setuptools(pyproject: dict) -> tuple[int, ...]:
    for req in pyproject["build-system"]["requires"]:
        m = re.fullmatch(r"setuptools\s*>=\s*([\d.]+)", req.strip())
        if m:
            return tuple(int(p) for p in m.group(1).split("."))
    raise AssertionError(f"no setuptools>=X in build-system.requires: {pyproject['build-system']['requires']}")


@pytest.mark.parametrize("path", PYPROJECTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_license_metadata_builds_on_the_declared_setuptools(path):
    """`license = "SPDX"` and `license-files` need setuptools>=77 (older ones reject the file, also with
    --no-build-isolation); the `license = {text=...}` table is deprecated from 77 on (removal due 2027-02-18)."""
    pyproject = tomllib.loads(path.read_text())
    project = pyproject["project"]
    assert not isinstance(project.get("license"), dict), "license as a TOML table: deprecated by setuptools>=77"
    if "license" in project or "license-files" in project:
        assert _min_setuptools(pyproject) >= (77,), "PEP 639 license keys need setuptools>=77 in requires"
