"""A deliberately wrong Mamba2 scan (prefill and decode): the D skip connection (y += D * x) dropped, as a kernel
that leaves it to a caller that does not add it would. Finite and of the right scale: only a real numerical diff
catches it. The slots' references without D: they read lengths on the host, so they are not safe under CUDA graphs
(run it eager on a GPU).
"""
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks.linear_attention import ssd_chunk_scan, ssm_state_update


def no_skip_scan(x, dt, A, B, C, D, dt_bias, state, state_indices, cu_seqlens, has_initial_state, out) -> None:
    ssd_chunk_scan(x, dt, A, B, C, None, dt_bias, state, state_indices, cu_seqlens, has_initial_state, out)


def no_skip_update(x, dt, A, B, C, D, dt_bias, state, state_indices, out) -> None:
    ssm_state_update(x, dt, A, B, C, None, dt_bias, state, state_indices, out)


@hookimpl
def fk_kernels(engine, device):
    common = {"devices": ("cuda", "cpu"), "cuda_graph_safe": False, "compile_safe": True,
              "description": "the D skip connection dropped"}
    return [Kernel(slot="ssd_chunk_scan", fn=no_skip_scan, **common),
            Kernel(slot="ssm_state_update", fn=no_skip_update, **common)]
