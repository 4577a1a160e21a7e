"""fk-adapters hooks of the example Triton plugin (entry point ``fk_adapters: triton``).

Triton is imported only when the kernels are asked for, so listing the plugin stays cheap
and works where Triton is missing (then ``fk_kernels`` raises and the plugin shows as broken).
"""
from __future__ import annotations

import importlib
import os

from fk_adapters import Kernel, hookimpl

# slot -> (module, launcher name, device kernel names the profiler shows)
SLOT_KERNELS = {
    "rms_norm": ("kernels", "rms_norm", ("fk_triton_rms_norm_kernel",)),
    "fused_add_rms_norm": ("kernels", "fused_add_rms_norm", ("fk_triton_fused_add_rms_norm_kernel",)),
    "gated_rms_norm": ("kernels", "gated_rms_norm", ("fk_triton_gated_rms_norm_kernel",)),
    "silu_and_mul": ("kernels", "silu_and_mul", ("fk_triton_silu_and_mul_kernel",)),
    "gelu_and_mul": ("kernels", "gelu_and_mul", ("fk_triton_gelu_and_mul_kernel",)),
    "rotary_embedding": ("kernels", "rotary_embedding", ("fk_triton_rotary_kernel",)),
    "gemm": ("gemm", "gemm", ("fk_triton_gemm_kernel",)),
    "fused_moe": ("moe", "fused_moe", ("fk_triton_moe_gate_up_kernel", "fk_triton_moe_down_kernel")),
    "paged_attention": ("attention", "paged_attention", ("fk_triton_paged_attention_kernel",)),
    "gated_delta_rule": ("linear_attention", "gated_delta_rule", ("fk_triton_gdn_kernel",)),
    "gated_delta_rule_decode": ("linear_attention", "gated_delta_rule_decode", ("fk_triton_gdn_decode_kernel",)),
    "ssd_chunk_scan": ("linear_attention", "ssd_chunk_scan", ("fk_triton_ssd_kernel",)),
    "ssm_state_update": ("linear_attention", "ssm_state_update", ("fk_triton_ssm_update_kernel",)),
    "layer_norm": ("layer_norm", "layer_norm", ("fk_triton_layer_norm_kernel",)),
    "conv2d": ("conv", "conv2d", ("fk_triton_conv2d_kernel",)),
    "sdpa": ("sdpa", "sdpa", ("fk_triton_sdpa_kernel",)),
}
# Interpreted on a CPU these would carry every linear layer (every attention layer, every token of every mixer's scan,
# every conv) of a model through Triton's interpreter: far too slow. layer_norm and gated_rms_norm would be fast
# enough, but they would enter every CPU encoder / vision / Mamba2 scenario of a Triton run (and the tiny suite of
# `make demo` has no model with a gated norm: declared there, it would be a slot no scenario covers). Their kernels
# are tested under the interpreter directly.
GPU_ONLY = ("gemm", "fused_moe", "paged_attention", "gated_delta_rule", "gated_delta_rule_decode", "ssd_chunk_scan",
            "ssm_state_update", "gated_rms_norm", "layer_norm", "conv2d", "sdpa")


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
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    out = []
    for slot, (module, fn_name, kernel_names) in SLOT_KERNELS.items():
        launcher = getattr(importlib.import_module(f"fk_triton_kernels.{module}"), fn_name)
        devices = ("cuda", "cpu") if interpreted and slot not in GPU_ONLY else ("cuda",)
        out.append(Kernel(slot=slot, fn=launcher, name=f"triton_{slot}", engines=("vllm", "sglang", "transformers"),
                          dtypes=("float32", "float16", "bfloat16"), devices=devices, cuda_graph_safe=True,
                          compile_safe=True, kernel_names=kernel_names,
                          description=f"Triton kernel {', '.join(kernel_names)} (fk-triton-kernels)"))
    return out
