"""A correct silu_and_mul that runs out of memory once the run's correctness results are kept (fk's partial.json holds
the teacher-forced logprobs): the engine dies in its throughput phase. On CUDA it asks for more device memory than any
GPU has (a real CUDA out-of-memory error); on CPU the whole engine is SIGKILLed, as the kernel's OOM killer would. fk
must keep the correctness results and the load records beside the failure (tests/engines/vllm/test_fail_safe.py)."""
import json
import os
import signal

import torch
import torch.nn.functional as F

from fk_adapters import Kernel, hookimpl


def _correctness_kept() -> bool:
    try:
        with open(os.path.join(os.environ["FK_RUN_DIR"], "partial.json")) as f:
            return "teacher_logprobs" in json.load(f)
    except (KeyError, OSError, ValueError):
        return False


def late_oom_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    if _correctness_kept():
        if x.is_cuda:
            torch.empty(1 << 46, dtype=torch.uint8, device=x.device)  # 64 TiB
        else:
            os.killpg(os.getpgid(0), signal.SIGKILL)
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="silu_and_mul", fn=late_oom_silu_and_mul, devices=("cuda", "cpu"), cuda_graph_safe=False,
                   compile_safe=False, description="out of memory in the throughput phase")]
