"""Checks that a kernel's result is real, complete, fresh and honestly timed.

Each function returns a list of problems (empty: passed). Pure torch, device-agnostic: the
same logic runs on CPU in the tests and on the GPU in ``fk check``.
"""
from __future__ import annotations

import threading
import time

# (atol, rtol) against the engine's own kernel, per dtype (FastKernels' kernel-level values).
TOLERANCES = {"float32": (1e-5, 1e-3), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2), "float64": (1e-10, 1e-8)}
# Elements outside the tolerance that still pass: at most this share of the result, each within
# OUTLIER_SPAN times the tolerance. Rounding differently (e.g. rounding a normalised value to
# bf16 before the weight multiply, as HF does) leaves a few elements 2 ulps from the engine.
OUTLIER_SHARE, OUTLIER_SPAN = 1e-4, 2.0
# An element no farther from the float64 reference than the engine's worst element also passes (summation order at a
# cancellation, e.g. a long GEMM row summing to near zero, moves either kernel by a few ulps there), provided the
# result as a whole is about as accurate as the engine's: mean error vs float64 at most MEAN_SLACK times the engine's.
MEAN_SLACK = 1.25


def dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def plain_tensor(out, like) -> list[str]:
    """``out`` must be a materialised tensor shaped like ``like`` (the engine's result)."""
    import torch

    if type(out) is not torch.Tensor:
        return [f"returned {type(out).__module__}.{type(out).__name__}, not a plain torch.Tensor"]
    problems = []
    if out.device != like.device or out.is_meta:
        problems.append(f"on device {out.device}, expected {like.device}")
    if out.shape != like.shape or out.dtype != like.dtype:
        problems.append(f"shape/dtype {tuple(out.shape)} {out.dtype}, expected {tuple(like.shape)} {like.dtype}")
    if any(st == 0 and n > 1 for st, n in zip(out.stride(), out.shape)):
        problems.append("a broadcast view (zero stride): not a materialised result")
    if out.numel() and (out.untyped_storage().nbytes() == 0 or out.data_ptr() == 0):
        problems.append("no storage behind the result")
    return problems


def aliases(out, inputs) -> list[str]:
    """A new result must not share memory with an input."""
    import torch

    ptr = out.untyped_storage().data_ptr()
    hits = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == ptr]
    return [f"result shares memory with argument #{i}" for i in hits]


def compare(got, engine, exact, dtype: str) -> tuple[list[str], dict]:
    """``got`` against the engine's result, with the float64 reference ``exact`` as arbiter.

    An element is within bounds when it is within (atol, rtol) of the engine's value, at least as close to the
    float64 reference as the engine's value is, or no farther from it than the engine's worst element (then the
    result's mean error vs float64 must be within ``MEAN_SLACK`` of the engine's). A few outliers pass
    (``OUTLIER_SHARE`` of the elements, each within ``OUTLIER_SPAN`` times the tolerance);
    NaN/Inf and an all-zero result where the reference and the engine's are not fail outright.
    """
    import torch

    atol, rtol = TOLERANCES[dtype]
    g, e, x = got.double(), engine.double(), exact.double()
    stats = {"max_abs_vs_engine": None, "max_abs_vs_exact": None, "engine_max_abs_vs_exact": None, "bad": 0}
    if not torch.isfinite(g).all():
        return [f"NaN/Inf in {int((~torch.isfinite(g)).sum())} elements (incl. any left unwritten)"], stats
    if g.numel() and not g.any() and x.any() and e.any():  # both zero: underflow at a tiny scale
        return ["all-zero result against a non-zero reference"], stats
    d_eng, d_x, e_x = (g - e).abs(), (g - x).abs(), (e - x).abs()
    tol = atol + rtol * e.abs()
    bad = ~((d_eng <= tol) | (d_x <= e_x))
    forgiven = bad & (d_x <= e_x.max()) if bad.any() else bad
    if forgiven.any():
        mean_c, mean_e = float(d_x.mean()), float(e_x.mean())
        if mean_c > MEAN_SLACK * mean_e:
            return [f"less accurate than the engine overall: mean |result - float64| {mean_c:.3g} > {MEAN_SLACK:g} x "
                    f"the engine's {mean_e:.3g}"], stats
        bad = bad & ~forgiven
    n_bad, n = int(bad.sum()), g.numel()
    stats.update(max_abs_vs_engine=float(d_eng.max()) if n else 0.0,
                 max_abs_vs_exact=float(d_x.max()) if n else 0.0,
                 engine_max_abs_vs_exact=float(e_x.max()) if n else 0.0, bad=n_bad, elements=n,
                 forgiven=int(forgiven.sum()))
    if not n_bad:
        return [], stats
    far = int((bad & (d_eng > OUTLIER_SPAN * tol)).sum())
    if n_bad <= OUTLIER_SHARE * n and not far:
        return [], stats
    return [f"{n_bad}/{n} elements outside (atol {atol:g}, rtol {rtol:g}) of the engine's result and farther "
            f"from the float64 reference than it and than its worst element, {far} of them beyond "
            f"{OUTLIER_SPAN:g}x the tolerance (max |Δ| {stats['max_abs_vs_engine']:.3g}; "
            f"up to {OUTLIER_SHARE:.2%} within {OUTLIER_SPAN:g}x pass)"], stats


def unchanged(before: tuple, after: tuple, writable: set[int]) -> list[str]:
    """Arguments the slot does not write must hold what they held before the call (NaN-aware)."""
    import torch

    out = []
    for i, (b, a) in enumerate(zip(before, after)):
        if i in writable or not isinstance(b, torch.Tensor):
            continue
        if not torch.equal(b.isnan(), a.isnan()) or not torch.equal(b.nan_to_num(), a.nan_to_num()):
            out.append(f"argument #{i} was modified (the slot does not write it)")
    return out


def cached(prev: tuple | None, now: tuple, prev_exact: tuple | None, now_exact: tuple) -> list[str]:
    """The same result for new inputs that have a different answer: an output cached across calls."""
    import torch

    if prev is None:
        return []
    same = all(torch.equal(p, n) for p, n in zip(prev, now))
    differs = any(not torch.allclose(p, n) for p, n in zip(prev_exact, now_exact))
    return ["returned the previous call's result for new inputs (cached output)"] if same and differs else []


class TimingIntegrity:
    """Identity of every function the timing relies on, taken before any plugin is imported."""

    def __init__(self):
        import torch

        self.watch = {"time.perf_counter": (time, "perf_counter"), "time.perf_counter_ns": (time, "perf_counter_ns"),
                      "torch.cuda.synchronize": (torch.cuda, "synchronize"),
                      "torch.cuda.Event": (torch.cuda, "Event"),
                      "torch.cuda.Event.record": (torch.cuda.Event, "record"),
                      "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time"),
                      "torch.cuda.Event.synchronize": (torch.cuda.Event, "synchronize"),
                      "torch.Tensor.zero_": (torch.Tensor, "zero_"), "torch.cuda._sleep": (torch.cuda, "_sleep")}
        try:
            import triton.testing

            self.watch["triton.testing.do_bench"] = (triton.testing, "do_bench")
        except ImportError:
            pass
        self.saved = {name: getattr(obj, attr) for name, (obj, attr) in self.watch.items()}

    def changed(self) -> list[str]:
        return [f"{name} was replaced" for name, (obj, attr) in self.watch.items()
                if getattr(obj, attr) is not self.saved[name]]


def live_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.is_alive()}


# Threads torch starts for its own compiler: SGLang's fused_moe torch.compiles a helper under 33 tokens, and the
# compile pool's timer thread may start while the candidate runs (session 34). Work a plugin starts runs elsewhere.
FRAMEWORK_THREAD_MODULES = ("torch._inductor.",)


def _framework_thread(t: threading.Thread) -> bool:
    target = getattr(t, "_target", None)
    module = getattr(target, "__module__", None) or type(t).__module__
    return module.startswith(FRAMEWORK_THREAD_MODULES)


def new_threads(before: set[int]) -> list[str]:
    extra = [t.name for t in threading.enumerate()
             if t.is_alive() and t.ident not in before and not _framework_thread(t)]
    return [f"left thread(s) running after the call: {', '.join(extra)}"] if extra else []


def escaped(cand_ratio: float, engine_ratio: float, limit: float = 1.5) -> list[str]:
    """Work that finished outside the timed stream: the candidate's wall time (everything
    synchronised) over its event-timed span, against the engine kernel's same ratio."""
    if cand_ratio > limit * max(engine_ratio, 1.0):
        return [f"wall time with every stream synchronised is {cand_ratio:.1f}x the timed span "
                f"(engine kernel: {engine_ratio:.1f}x): work escapes the timed stream"]
    return []
