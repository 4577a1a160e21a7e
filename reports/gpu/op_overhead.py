"""Host microseconds a call of an fk-wrapped op costs beyond the plain call it wraps (session 56).

Runs without an engine: ``python reports/gpu/op_overhead.py [cuda|cpu]``. Shapes small enough that the loop is
host-bound (the device keeps up), so each figure is host time per call: the plain ``F.linear``, the same call
through ``ops.wrap`` as fk registers a plugin's kernel (dispatch, the body's dtype check and counting), and that op
with its engine-op watch (``native=``). Medians of 7 batches of 2,000 calls, with their range."""
import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/reports/", 1)[0])

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fk_adapters import ops  # noqa: E402
from fk_adapters.tasks import SLOTS  # noqa: E402


def per_call_us(fn, args, device, calls=2000, batches=7) -> tuple[float, float, float]:
    for _ in range(200):
        fn(*args)
    out = []
    for _ in range(batches):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        out.append((time.perf_counter() - t) / calls * 1e6)
    return statistics.median(out), min(out), max(out)


def main(device: str) -> None:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    k = 2048 if device == "cuda" else 64  # on a CPU the GEMM itself must stay small
    x, w = torch.randn(32, k, device=device, dtype=dtype), torch.randn(k, k, device=device, dtype=dtype)
    name = "bfloat16" if dtype == torch.bfloat16 else "float32"
    plain = ops.wrap("overhead_plain", SLOTS["gemm"], lambda a, b, c: F.linear(a, b, c), (name,))
    watched = ops.wrap("overhead_watched", SLOTS["gemm"], lambda a, b, c: F.linear(a, b, c), (name,),
                       native=lambda a, b, c: F.linear(a, b, c))
    rows = [("F.linear", F.linear), ("fk op", plain), ("fk op, watched", watched)]
    base = None
    print(f"device {device} ({torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}), torch {torch.__version__}")
    for label, fn in rows:
        med, lo, hi = per_call_us(fn, (x, w, None), device)
        base = med if base is None else base
        print(f"{label:16s} {med:7.2f} us a call [{lo:.2f}, {hi:.2f}]  (+{med - base:.2f} over F.linear)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu"))
