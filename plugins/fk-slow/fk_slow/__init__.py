"""A known, deliberate slowdown: the engine's own ``rms_norm`` / ``fused_add_rms_norm`` plus a fixed delay per call.

Results are the engine kernel's own, bit for bit (correctness passes); each call then waits
``FK_SLOW_US`` microseconds (default 20), read once when the plugin is loaded:

- CUDA tensors: ``torch.cuda._sleep(cycles)`` right after the engine's kernel, on the same
  stream. It launches ATen's ``spin_kernel`` (one thread spinning on ``clock64()``), an
  ordinary kernel launch with no host sync, so it is captured into CUDA graphs and replayed
  with them. ``cycles`` = delay x the SM clock (see :func:`cycles_per_us`).
- CPU tensors: a ``time.perf_counter`` busy-wait after the (synchronous) engine op.

It declares no profiler kernel names: ``spin_kernel`` is ATen's, not this plugin's, so it cannot prove the plugin ran
(fk_adapters/kernel_names.py), and both slots launch it. Its proof of run is its op's calls (eager, graph capture).
fk wraps the kernel as an opaque torch custom op (``fk_slow::<slot>``): torch.compile sees its
fake implementation only and never traces into the delay, and every call goes through the op's
body, which is where fk's probe counts it. See README.md for calibrating the end-to-end slowdown.
"""
from __future__ import annotations

import logging
import math
import os
import time

from fk_adapters import Kernel, hookimpl

ENV = "FK_SLOW_US"
DEFAULT_US = 20.0
MAX_US = 1_000_000.0  # one second per call: more than that is a typo, not an experiment
SLOTS = ("rms_norm", "fused_add_rms_norm")
SPIN_KERNEL = "spin_kernel"  # the device kernel torch.cuda._sleep launches (ATen, at::cuda::sleep)
FALLBACK_MHZ = 2000.0  # when no SM clock can be read: at least the max clock of current datacenter GPUs,
#                        so the delay errs long (real time = cycles / real clock)
log = logging.getLogger(__name__)


class DelayError(ValueError):
    """FK_SLOW_US is not a usable delay."""


def parse_delay_us(text: str | None) -> float:
    """The per-call delay in microseconds from the text of ``FK_SLOW_US``; unset or blank -> DEFAULT_US."""
    if text is None or not text.strip():
        return DEFAULT_US
    try:
        us = float(text.strip())
    except ValueError:
        raise DelayError(f"{ENV}={text!r} is not a number of microseconds (e.g. {ENV}=20)") from None
    if not math.isfinite(us) or not 0.0 <= us <= MAX_US:
        raise DelayError(f"{ENV}={text!r}: the delay must be a number of microseconds from 0 to {MAX_US:g}")
    return us


DELAY_US = parse_delay_us(os.environ.get(ENV))  # once, at load: a bad value makes the plugin fail to load

# ----------------------------------------------------------------------------- the delay

_cycles_per_us: dict[int, tuple[float, str]] = {}  # CUDA device index -> (SM cycles per microsecond, source)


def _clock_mhz_from_torch(index: int) -> float:
    import torch

    return getattr(torch.cuda.get_device_properties(index), "clock_rate", 0) / 1000.0  # kHz -> MHz


def _clock_mhz_measured(index: int) -> float:
    """Time a spin of known cycles with CUDA events (never during a graph capture)."""
    import torch

    if torch.cuda.is_current_stream_capturing():
        return 0.0
    cycles = 2_000_000
    with torch.cuda.device(index):
        torch.cuda._sleep(cycles // 10)  # wake the clocks up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        us = start.elapsed_time(end) * 1000.0
    return cycles / us if us > 0 else 0.0


def cycles_per_us(index: int) -> tuple[float, str]:
    """(SM clock cycles per microsecond, where that number came from) for CUDA device ``index``, cached.

    The device's max SM clock (``clock_rate`` of torch's device properties, kHz) when torch has it;
    else one measured spin (CUDA events); else FALLBACK_MHZ. At the max clock the spin lasts the
    delay; a GPU running below it spins longer, never shorter.
    """
    if index not in _cycles_per_us:
        for source, read in (("torch device properties clock_rate", _clock_mhz_from_torch),
                             ("measured spin", _clock_mhz_measured)):
            try:
                mhz = float(read(index))
            except Exception as exc:  # noqa: BLE001 - an unreadable clock falls through to the next source
                log.debug("fk-slow: %s unavailable: %s", source, exc)
                continue
            if mhz > 0:
                _cycles_per_us[index] = (mhz, source)
                break
        else:
            log.warning("fk-slow: no SM clock for cuda:%d, assuming %g MHz (the delay may run long)",
                        index, FALLBACK_MHZ)
            _cycles_per_us[index] = (FALLBACK_MHZ, "fallback")
    return _cycles_per_us[index]


def spin_cycles(index: int, us: float) -> int:
    return max(1, round(us * cycles_per_us(index)[0]))


def busy_wait(us: float) -> None:
    """Hold the calling thread for ``us`` microseconds (a spin, not a sleep: no scheduler rounding)."""
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def wait(like, us: float) -> None:
    """The delay after one call whose tensors live where ``like`` does."""
    if us <= 0:
        return
    if like.is_cuda:
        import torch

        index = like.device.index if like.device.index is not None else torch.cuda.current_device()
        cycles = spin_cycles(index, us)
        if index == torch.cuda.current_device():
            torch.cuda._sleep(cycles)  # on the current stream, after the engine's kernel
        else:
            with torch.cuda.device(index):
                torch.cuda._sleep(cycles)
    else:
        busy_wait(us)


def slowed(native, delay_us: float | None = None):
    """The factory: ``native`` (the engine's own kernel, slot interface), then the delay."""
    us = DELAY_US if delay_us is None else delay_us

    def kernel(*args):
        out = native(*args)
        wait(args[0], us)
        return out

    kernel.__name__ = f"slow_{getattr(native, '__name__', 'native')}"
    kernel.delay_us = us
    return kernel


# ----------------------------------------------------------------------------- hooks

def kernels(delay_us: float) -> list[Kernel]:
    def factory(native):
        return slowed(native, delay_us)

    return [Kernel(slot=s, factory=factory, name=f"engine:{s}+{delay_us:g}us", devices=("cuda", "cpu"),
                   cuda_graph_safe=True, compile_safe=True,
                   description=f"the engine's own {s}, then a {delay_us:g} us delay ({ENV})",
                   extra={"delay_us": delay_us}) for s in SLOTS]


@hookimpl
def fk_plugin_info():
    return {"backend": "engine's own kernels + a fixed delay per call", "delay_us": DELAY_US, "delay_env": ENV,
            "cuda_delay": f"torch.cuda._sleep ({SPIN_KERNEL}), cycles = delay x SM clock", "cpu_delay": "busy-wait"}


@hookimpl
def fk_kernels(engine, device):
    return kernels(DELAY_US)
