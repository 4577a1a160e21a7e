"""The hooks an fk kernel plugin implements.

A plugin is an installed distribution with an entry point in the group ``fk_adapters``;
the entry point names a module or object that carries ``@fk_adapters.hookimpl``
functions. Every hook is declared here, once, with when it is called and what its
answer means. Plugins are loaded in every engine process that builds a model, so a
hook must be cheap and free of side effects other than the ones it documents.
"""
from __future__ import annotations

import pluggy

PROJECT = "fk_adapters"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def fk_kernels(engine: str, device: str) -> list:
    """Return the kernels this plugin offers, as a list of :class:`fk_adapters.Kernel`.

    Called once per process, right after the plugin is loaded, before the engine builds
    its model. ``engine`` is the engine being adapted (``"vllm"``, ``"sglang"``) or
    ``"none"`` when only listing; ``device`` is ``"cuda"`` or ``"cpu"``. A plugin may
    offer different kernels per engine or device, or none. Each kernel names one catalog
    slot; a plugin offers at most one kernel per slot. Raising marks the plugin broken
    (reported by ``fk plugins``; fatal in strict mode).
    """


@hookspec
def fk_plugin_info() -> dict:
    """Return free-form facts about the plugin for reports (e.g. ``{"backend": "triton"}``).

    Optional. Called once per process when the plugin is loaded.
    """
