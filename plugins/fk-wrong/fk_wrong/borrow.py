"""A plugin that games the proof of run: every slot is the engine's own kernel, declared under the engine's own kernel
names (vLLM's CUDA kernels). fk must call it "not proven": the names are not the plugin's, and the stock engine
launches them itself."""
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks import SLOTS

ENGINE_NAMES = {"rms_norm": "rms_norm_kernel", "fused_add_rms_norm": "fused_add_rms_norm_kernel",
                "silu_and_mul": "act_and_mul_kernel", "gelu_and_mul": "act_and_mul_kernel",
                "rotary_embedding": "rotary_embedding_kernel"}


def _same(native):
    return native


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot=s, factory=_same, name=f"borrowed:{s}", devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, kernel_names=(ENGINE_NAMES[s],)) for s in SLOTS if s in ENGINE_NAMES]
