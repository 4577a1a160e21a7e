"""Discover, select and load fk kernel plugins (entry-point group ``fk_adapters``).

Selection: an allowlist of entry-point names, from ``--plugins`` or ``FK_PLUGINS``
(comma separated). Each plugin loads inside its own try/except: a broken one is recorded
and the others still load, unless strict mode (``--strict`` or ``FK_STRICT=1``) is on,
where the first failure raises :class:`PluginLoadError`.
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from importlib import metadata

import pluggy

from fk_adapters import hookspec, kernel_names
from fk_adapters.kernel import Kernel, KernelSpecError
from fk_adapters.sources import source_digest

GROUP = "fk_adapters"
ENV_ALLOW = "FK_PLUGINS"
ENV_STRICT = "FK_STRICT"
log = logging.getLogger(__name__)


class PluginLoadError(RuntimeError):
    """A selected plugin could not be loaded (strict mode) or does not exist."""


@dataclass
class LoadedPlugin:
    name: str
    dist: str = ""
    version: str = ""
    target: str = ""
    kernels: list[Kernel] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    error: str = ""
    source_sha256: str = ""  # of the plugin package's source files: the same code wherever it is installed
    names_defined: dict[str, list[str]] = field(default_factory=dict)  # {slot: declared kernel names it defines}
    # {slot: declared kernel names the hosting engine's own package defines as Triton kernels too}
    names_in_engine: dict[str, list[str]] = field(default_factory=dict)

    def describe(self) -> dict:
        return {"name": self.name, "dist": self.dist, "version": self.version, "target": self.target,
                "source_sha256": self.source_sha256, "info": self.info, "error": self.error,
                "kernels": [dict(k.describe(), kernel_names_defined=self.names_defined.get(k.slot, []),
                                 **({"kernel_names_in_engine": self.names_in_engine[k.slot]}
                                    if self.names_in_engine.get(k.slot) else {}))
                            for k in self.kernels]}


def parse_allowlist(text: str | None) -> list[str] | None:
    """'a, b' -> ['a', 'b']; None stays None (no allowlist); '' -> [] (nothing selected)."""
    if text is None:
        return None
    return [n.strip() for n in text.split(",") if n.strip()]


def allowlist_from_env() -> list[str] | None:
    return parse_allowlist(os.environ.get(ENV_ALLOW))


def any_selected_in_env() -> bool:
    """Whether this process was given fk plugins at all (unset or empty ``FK_PLUGINS``: a stock engine)."""
    return bool(os.environ.get(ENV_ALLOW, "").strip())


def strict_from_env() -> bool:
    return os.environ.get(ENV_STRICT, "").strip().lower() in ("1", "true", "yes", "on")


def discover() -> dict[str, metadata.EntryPoint]:
    """Installed plugin entry points by name."""
    return {ep.name: ep for ep in metadata.entry_points(group=GROUP)}


def _known_slots():
    from fk_adapters.tasks import SLOTS

    return SLOTS


def _record(ep: metadata.EntryPoint) -> LoadedPlugin:
    dist = ep.dist
    return LoadedPlugin(name=ep.name, dist=dist.metadata["Name"] if dist else "", version=dist.version if dist else "",
                        target=ep.value)


def _load_one(ep: metadata.EntryPoint, engine: str, device: str) -> LoadedPlugin:
    plugin = _record(ep)
    pm = pluggy.PluginManager(hookspec.PROJECT)
    pm.add_hookspecs(hookspec)
    obj = ep.load()
    plugin.source_sha256 = source_digest(ep.module)
    pm.register(obj, name=ep.name)
    pm.check_pending()
    for answer in pm.hook.fk_plugin_info():
        plugin.info.update(answer or {})
    kernels = [k for answer in pm.hook.fk_kernels(engine=engine, device=device) for k in (answer or [])]
    _check_kernels(kernels)
    plugin.kernels = kernels
    plugin.names_defined = {k.slot: (kernel_names.defined_by_library(ep.dist, k.kernel_library, k.kernel_names)
                                     if k.kernel_library else kernel_names.defined(ep.module, ep.dist, k.kernel_names))
                            for k in kernels if k.kernel_names}
    own = [k for k in kernels if k.kernel_names and not k.kernel_library]
    in_engine = set(kernel_names.jit_in_package(engine, [n for k in own for n in k.kernel_names]))
    plugin.names_in_engine = {k.slot: [n for n in k.kernel_names if n in in_engine] for k in own}
    return plugin


def _check_kernels(kernels: list) -> None:
    """KernelSpecError naming every kernel that breaks the contract (``Kernel.validate``), or two for one slot."""
    problems, seen = [], set()
    for k in kernels:
        if not isinstance(k, Kernel):
            raise KernelSpecError(f"fk_kernels returned {type(k).__name__}, not fk_adapters.Kernel")
        try:
            k.validate(_known_slots())
        except KernelSpecError as exc:
            problems.append(str(exc))
        if k.slot in seen:
            problems.append(f"two kernels for slot {k.slot!r}")
        seen.add(k.slot)
    if problems:
        raise KernelSpecError("; ".join(problems))


@contextlib.contextmanager
def _environment(env: dict[str, str] | None):
    """``os.environ`` updated with ``env`` for the duration, then restored as it was (what the plugins' imports set
    included); None: left alone."""
    if env is None:
        yield
        return
    before = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


def load_plugins(allow: list[str] | None = None, strict: bool = False, engine: str = "none",
                 device: str = "cpu", env: dict[str, str] | None = None) -> list[LoadedPlugin]:
    """Load the selected plugins (all installed ones when ``allow`` is None), in allowlist order.

    A name in the allowlist that is not installed is an error in every mode: selecting a
    plugin that cannot run must never look like a run of it. ``env``: variables set while the plugins
    import, as the engine's processes have them (e.g. ``TRITON_INTERPRET`` on CPU); the environment is restored after.
    """
    found = discover()
    if allow is None:
        names = sorted(found)
    else:
        missing = [n for n in allow if n not in found]
        if missing:
            raise PluginLoadError(f"plugin(s) not installed: {', '.join(missing)}"
                                  f" (installed: {', '.join(sorted(found)) or 'none'})")
        names = list(dict.fromkeys(allow))
    with _environment(env):
        return [_load_isolated(found[name], strict, engine, device) for name in names]


def _load_isolated(ep: metadata.EntryPoint, strict: bool, engine: str, device: str) -> LoadedPlugin:
    """One plugin loaded; where that fails, a record of why (or, ``strict``, PluginLoadError naming it)."""
    name = ep.name
    try:
        plugin = _load_one(ep, engine, device)
    except Exception as exc:  # a broken plugin must not take the others down
        if strict:
            raise PluginLoadError(f"plugin {name!r} failed to load: {type(exc).__name__}: {exc}") from exc
        log.warning("fk plugin %s failed to load: %s", name, exc)
        plugin = _record(ep)
        plugin.error = f"{type(exc).__name__}: {exc}"
    return plugin


def select_kernels(plugins: list[LoadedPlugin], engine: str, device: str,
                   slots=None) -> tuple[dict[str, tuple[str, Kernel]], list[str]]:
    """Pick one kernel per slot: the first selected plugin that offers the slot for this engine and device wins.
    ``slots``: the slots this process's entries reach, where not the catalog's ``entries`` for the engine (SGLang's
    diffusion workers).

    Returns ({slot: (plugin name, kernel)}, notes on what was skipped and why).
    """
    from fk_adapters.tasks import SLOTS

    chosen: dict[str, tuple[str, Kernel]] = {}
    notes = []
    for p in plugins:
        if p.error:
            continue
        for k in p.kernels:
            if engine not in k.engines:
                notes.append(f"{p.name}:{k.slot} skipped: not for engine {engine}")
            elif slots is not None and k.slot not in slots:
                notes.append(f"{p.name}:{k.slot} skipped: no entry for the slot in this {engine} process")
            elif slots is None and k.slot in SLOTS and engine not in SLOTS[k.slot].entries:
                notes.append(f"{p.name}:{k.slot} skipped: the slot has no entry in {engine}")
            elif device not in k.devices:
                notes.append(f"{p.name}:{k.slot} skipped: not for device {device}")
            elif k.slot in chosen:
                notes.append(f"{p.name}:{k.slot} shadowed by {chosen[k.slot][0]}")
            else:
                chosen[k.slot] = (p.name, k)
    return chosen, notes
