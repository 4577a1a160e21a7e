"""One installed-looking fk plugin with one kernel, selected for an SGLang process under test."""
from __future__ import annotations


def select_one_kernel(make_plugin, monkeypatch, tmp_path, name: str, slot: str) -> None:
    """Plugin ``name`` with a pass-through kernel for ``slot``, selected (``FK_PLUGINS``), its load record under
    ``tmp_path``; no exit dump."""
    from fk_adapters.engines.sglang import general_plugin

    make_plugin(name, f"""
        from fk_adapters import Kernel, hookimpl

        @hookimpl
        def fk_kernels(engine, device):
            return [Kernel(slot="{slot}", factory=lambda native: native, cuda_graph_safe=True)]
    """)
    monkeypatch.setenv("FK_PLUGINS", name)
    monkeypatch.setenv("FK_RUN_DIR", str(tmp_path))
    monkeypatch.setattr(general_plugin, "dump_at_exit", lambda: None)
