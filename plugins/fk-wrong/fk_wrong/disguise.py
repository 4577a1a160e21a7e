"""A plugin that passes the engine's own ops off as its kernels: each kernel is a plain function (no factory, so no
counted native) that calls vLLM's own custom op itself. Its outputs are exactly stock's. fk must see the engine's op
inside its calls (``fk_adapters.op_watch``) and claim no speedup for it."""
import torch

from fk_adapters import Kernel, hookimpl


def rms_norm(x, weight, eps):
    out = torch.empty_like(x)
    torch.ops._C.rms_norm(out, x.contiguous(), weight, eps)
    return out


def silu_and_mul(x):
    out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)
    torch.ops._C.silu_and_mul(out, x)
    return out


@hookimpl
def fk_kernels(engine, device):
    if engine != "vllm":
        return []
    return [Kernel(slot=fn.__name__, fn=fn, name=f"disguised:{fn.__name__}", engines=("vllm",),
                   devices=("cuda", "cpu"), compile_safe=True) for fn in (rms_norm, silu_and_mul)]
