"""The import graph of fk_adapters, read from its source: no module may import itself through others.

Every import counts, module-level and inside functions (a function-level import still ties the two modules
together; it only hides the cycle until the call). ``from fk_adapters import x`` is an edge to the submodule
``x`` where there is one, else to the package.
"""
from __future__ import annotations

import ast
import pathlib

import fk_adapters

ROOT = pathlib.Path(fk_adapters.__file__).resolve().parent
PACKAGE = "fk_adapters"


def module_files(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
    """{dotted module name: file} of every .py file under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((PACKAGE, *parts))] = path
    return out


def _resolve(level: int, module: str | None, importer: str, is_package: bool) -> str:
    """The absolute name an ``import``/``from`` statement refers to (``level``: its leading dots)."""
    if not level:
        return module or ""
    parts = importer.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (level - 1)]
    return ".".join(anchor + ([module] if module else []))


def imports_of(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The fk_adapters modules that module ``name`` imports anywhere in its file."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.level, node.module, name, path.name == "__init__.py")
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `import fk_adapters.x.y` of a non-module attribute: its module
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {name: imports_of(name, path, known) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_graph_sees_function_level_and_submodule_imports(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from fk_adapters import b\n")
    (pkg / "b.py").write_text("from fk_adapters.sub import c\n")
    (pkg / "sub" / "c.py").write_text("from ..a import f\nfrom . import d\n")
    (pkg / "sub" / "d.py").write_text("import fk_adapters.a\n")
    files = module_files(pkg)
    known = set(files)
    graph = {n: imports_of(n, p, known) for n, p in files.items()}
    assert graph["fk_adapters.a"] == {"fk_adapters.b"}
    assert graph["fk_adapters.sub.c"] == {"fk_adapters.a", "fk_adapters.sub.d"}
    assert graph["fk_adapters.sub.d"] == {"fk_adapters.a"}
    assert cycles(graph) == [["fk_adapters.a", "fk_adapters.b", "fk_adapters.sub.c", "fk_adapters.sub.d"]]


def test_no_import_cycle_in_fk_adapters():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)
