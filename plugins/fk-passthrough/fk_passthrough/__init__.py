"""Every catalog slot routed to the engine's own kernel (through the full fk adapter path)."""
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks import SLOTS


def _same(native):
    return native


@hookimpl
def fk_plugin_info():
    return {"backend": "engine's own kernels"}


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot=s, factory=_same, name=f"engine:{s}", devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True) for s in SLOTS]
