"""fk-adapters hooks of the example Triton plugin (entry point ``fk_adapters: triton``).

Triton is imported only when the kernels are asked for, so listing the plugin stays cheap
and works where Triton is missing (then ``fk_kernels`` raises and the plugin shows as broken).
"""
from __future__ import annotations

import os

from fk_adapters import Kernel, hookimpl

# slot -> (launcher name in kernels.py, device kernel name the profiler shows)
SLOT_KERNELS = {
    "rms_norm": ("rms_norm", "fk_triton_rms_norm_kernel"),
    "fused_add_rms_norm": ("fused_add_rms_norm", "fk_triton_fused_add_rms_norm_kernel"),
    "silu_and_mul": ("silu_and_mul", "fk_triton_silu_and_mul_kernel"),
    "gelu_and_mul": ("gelu_and_mul", "fk_triton_gelu_and_mul_kernel"),
    "rotary_embedding": ("rotary_embedding", "fk_triton_rotary_kernel"),
}


@hookimpl
def fk_plugin_info() -> dict:
    try:
        import triton
        version = triton.__version__
    except Exception as exc:  # noqa: BLE001 - report, do not fail listing
        version = f"unavailable ({type(exc).__name__}: {exc})"
    return {"backend": "triton", "triton": version}


@hookimpl
def fk_kernels(engine: str, device: str) -> list:
    from fk_triton_kernels import kernels

    devices = ("cuda", "cpu") if os.environ.get("TRITON_INTERPRET") == "1" else ("cuda",)
    return [
        Kernel(slot=slot, fn=getattr(kernels, fn_name), name=f"triton_{slot}",
               engines=("vllm", "sglang", "transformers"), dtypes=("float32", "float16", "bfloat16"), devices=devices,
               cuda_graph_safe=True,
               compile_safe=True, kernel_names=(kernel_name,),
               description=f"Triton kernel {kernel_name} (fk-triton-kernels)")
        for slot, (fn_name, kernel_name) in SLOT_KERNELS.items()
    ]
