"""Code shape limits that keep fk_adapters readable: no function longer than MAX_FUNCTION_LINES."""
from __future__ import annotations

import ast
import pathlib

import fk_adapters

ROOT = pathlib.Path(fk_adapters.__file__).resolve().parent
MAX_FUNCTION_LINES = 60


def long_functions(root: pathlib.Path = ROOT, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """'path:line name (n lines)' for each function or method of more than ``limit`` lines, its ``def`` line to its
    last (nested functions count in the function that holds them, and on their own)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_the_measure_counts_def_to_last_line(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (tmp_path / "m.py").write_text(f"def fits():\n{body[:body.rindex(chr(10))]}\n\n\ndef too_long():\n{body}\n")
    assert long_functions(tmp_path) == [f"{tmp_path.name}/m.py:63 too_long (61 lines)"]


def test_no_function_is_longer_than_the_limit():
    found = long_functions()
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(found)


def test_no_two_test_modules_share_a_name():
    """Test folders without __init__.py are imported by file name: two test_x.py there stop the whole collection
    ("import file mismatch", session 41's CI run)."""
    tests = pathlib.Path(__file__).resolve().parent
    seen: dict[str, pathlib.Path] = {}
    clashes = []
    for path in sorted(tests.rglob("test_*.py")):
        if (path.parent / "__init__.py").exists():
            continue
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(tests)} and {path.relative_to(tests)}")
        seen.setdefault(path.name, path)
    assert not clashes, "test modules sharing a name: " + "; ".join(clashes)
