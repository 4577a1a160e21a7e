"""A plugin that loads in fk's own process (its checks before a run pass) but raises inside every engine process,
as a plugin that checks the engine it runs in would. fk must fail the run and name the error."""
import sys

from fk_adapters import Kernel, hookimpl


def _same(native):
    return native


@hookimpl
def fk_kernels(engine, device):
    if engine in sys.modules:  # inside the engine's own process (fk's CLI never imports an engine)
        raise RuntimeError(f"fk-wrong broken-in-engine: refuses to load inside {engine}")
    return [Kernel(slot="rms_norm", factory=_same, devices=("cuda", "cpu"), cuda_graph_safe=True, compile_safe=True)]
