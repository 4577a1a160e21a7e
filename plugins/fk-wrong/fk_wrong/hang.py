"""A kernel that never returns: the engine hangs at its first call. fk must kill the run at its time limit, and leave
no engine process behind when fk itself is stopped (tests/engines/vllm/test_fail_safe.py)."""
import time

from fk_adapters import Kernel, hookimpl


def stuck_silu_and_mul(x):
    while True:
        time.sleep(1)


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="silu_and_mul", fn=stuck_silu_and_mul, devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, description="never returns")]
