"""Kernels that cheat, one way each; every one must be caught by the guard meant for it."""
from __future__ import annotations

import threading
import time

import torch

from fk_adapters.tasks import SLOTS

reference_silu = SLOTS["silu_and_mul"].reference
reference_rms = SLOTS["rms_norm"].reference


class CachedOutput:
    """Computes once, then returns the same tensor for any input."""

    def __init__(self):
        self.out = None

    def __call__(self, x):
        if self.out is None:
            self.out = reference_silu(x)
        return self.out


def mutates_input(x, weight, eps):
    """Right answer, but scribbles on its input."""
    out = reference_rms(x, weight, eps)
    x.mul_(0.5)
    return out


def zero_output(x):
    return torch.zeros(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)


def background_thread(x):
    """Returns at once; a thread fills the result later (work escaping the timed call)."""
    out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)

    def fill():
        time.sleep(0.05)
        out.copy_(reference_silu(x))

    t = threading.Thread(target=fill, name="cheat-fill", daemon=True)
    t.start()
    THREADS.append(t)
    return out


THREADS: list[threading.Thread] = []  # joined by the test, so none outlives it


class PatchesTiming:
    """Right answer; on first call replaces time.perf_counter with a clock that barely moves."""

    def __call__(self, x):
        if not getattr(time.perf_counter, "_cheat", False):
            real = time.perf_counter

            def slow_clock():
                return real() / 1000.0

            slow_clock._cheat = True
            time.perf_counter = slow_clock
        return reference_silu(x)


def fake_tensor(x):
    """A broadcast view: looks the right shape, holds one row."""
    return reference_silu(x[:1]).expand(x.shape[:-1] + (x.shape[-1] // 2,))


def uninitialised(x):
    """Never writes its result: whatever the allocator hands back is returned."""
    return torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)


class SideStream:
    """CUDA only: honest for its first calls (the correctness rounds), then does the work on its own
    stream that the caller's stream never waits for: events on the caller's stream time nothing."""

    def __init__(self, honest_calls: int = 3):
        self.calls, self.honest_calls, self.stream = 0, honest_calls, None

    def __call__(self, x):
        self.calls += 1
        if self.calls <= self.honest_calls:
            return reference_silu(x)
        out = torch.empty(x.shape[:-1] + (x.shape[-1] // 2,), dtype=x.dtype, device=x.device)
        self.stream = self.stream or torch.cuda.Stream()
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            out.copy_(reference_silu(x))
        return out
