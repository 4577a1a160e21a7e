"""Kernel timing for ``fk check``: interleaved, cache-cold, on rotating input buffers.

On CUDA every call is timed with device events on the current stream, from an idle device,
after the L2 cache is flushed (a buffer twice its size is overwritten) and behind a short GPU
spin that hides the host's launch work: the device time, what a call costs under CUDA graphs. The spin is
lengthened for a function whose launch (measured in its warm-up) outlasts the base spin, as an engine's MoE
dispatch can.
The host time of each call (launch work, the cost in eager mode) is kept beside it. On CPU,
``perf_counter`` (not a performance claim). The clock functions are the ones saved before any
plugin was imported.
"""
from __future__ import annotations

import math
import statistics


class Clock:
    SPIN_CYCLES = 500_000  # about 0.25-0.35 ms of GPU clock: covers any launch not itself suspect
    MAX_SPINS = 64  # a launch longer than ~20 ms stays uncovered (and flagged)

    def __init__(self, device: str, saved: dict):
        import torch

        self.device, self.saved = device, saved
        self.flush_buf, self.spin_s = None, 0.0
        if device == "cuda":
            l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size or (50 << 20)
            self.flush_buf = torch.empty(2 * l2, dtype=torch.int8, device="cuda")
            self.spin_s = min(self.time_calls([(self._spin, ())] * 5))
        self.flush_bytes = 0 if self.flush_buf is None else self.flush_buf.numel()

    def flush(self) -> None:
        if self.flush_buf is not None:
            self.saved["torch.Tensor.zero_"](self.flush_buf)

    def _spin(self, spins: int = 1) -> None:
        self.saved["torch.cuda._sleep"](self.SPIN_CYCLES * spins)

    def spins_for(self, host_s: float) -> int:
        """How many base spins hide a launch of ``host_s`` seconds with half of it to spare (at least one)."""
        if not self.spin_s:
            return 1
        return max(1, min(self.MAX_SPINS, math.ceil(1.5 * host_s / self.spin_s)))

    def sync(self) -> None:
        if self.device == "cuda":
            self.saved["torch.cuda.synchronize"]()

    def time_calls(self, calls, host: list | None = None, spins: list[int] | None = None) -> list[float]:
        """Seconds of each ``fn(*args)`` in ``calls``, each after an L2 flush; on CUDA the device
        time behind ``spins[i]`` base spins (one each by default), with the host seconds of each call appended to
        ``host`` if given."""
        now = self.saved["time.perf_counter"]
        if self.device != "cuda":
            out = []
            for fn, args in calls:
                t0 = now()
                fn(*args)
                out.append(now() - t0)
            return out
        event = self.saved["torch.cuda.Event"]
        marks = []
        for i, (fn, args) in enumerate(calls):
            self.sync()  # nothing of the previous call (host or device) overlaps this one
            self.flush()
            if self.spin_s:
                self._spin(spins[i] if spins else 1)  # the device is busy while the host launches fn
            start, end = event(enable_timing=True), event(enable_timing=True)
            start.record()
            t0 = now()
            fn(*args)
            if host is not None:
                host.append(now() - t0)
            end.record()
            marks.append((start, end))
        self.sync()
        return [s.elapsed_time(e) / 1e3 for s, e in marks]

    def wall_over_span(self, fn, sets, k: int = 20) -> float:
        """Wall time of ``k`` calls with every stream synchronised, over their event-timed span."""
        if self.device != "cuda":
            return 1.0
        now, event = self.saved["time.perf_counter"], self.saved["torch.cuda.Event"]
        self.sync()
        start, end = event(enable_timing=True), event(enable_timing=True)
        t0 = now()
        start.record()
        for j in range(k):
            fn(*sets[j % len(sets)])
        end.record()
        self.sync()
        wall = now() - t0
        return wall / max(start.elapsed_time(end) / 1e3, 1e-9)


def bench_pair(clock: Clock, fns: dict, sets: list[tuple], warmup: int, repeats: int) -> tuple[dict, dict, dict]:
    """Interleave the candidates call by call (order alternating), each on the next input buffer.

    Returns (timed seconds, host seconds, the spin each was timed behind in seconds) per name; host seconds only on
    CUDA. Each name's spin covers its warm-up launches' median host time; where its timed launches took longer
    than that spin (a launch can cost more after a flush and a spin than in the warm-up), every name is timed again
    once, that name behind a spin that covers its timed launches."""
    names = list(fns)
    now = clock.saved["time.perf_counter"]
    launch: dict[str, list[float]] = {n: [] for n in names}
    for w in range(warmup):
        for name in names:
            t0 = now()
            fns[name](*sets[w % len(sets)])
            launch[name].append(now() - t0)
            clock.sync()
    spins = {n: clock.spins_for(statistics.median(launch[n])) if launch[n] else 1 for n in names}
    times, host = _timed(clock, fns, sets, repeats, spins)
    longer = {n: clock.spins_for(statistics.median(host[n])) for n in names if host[n]}
    if any(longer[n] > spins[n] for n in longer):
        spins = {n: max(spins[n], longer.get(n, 1)) for n in names}
        times, host = _timed(clock, fns, sets, repeats, spins)
    return times, host, {n: spins[n] * clock.spin_s for n in names}


def _timed(clock: Clock, fns: dict, sets: list[tuple], repeats: int, spins: dict) -> tuple[dict, dict]:
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    host: dict[str, list[float]] = {n: [] for n in names}
    for i in range(repeats):
        order = names if i % 2 == 0 else names[::-1]
        spent: list[float] = []
        got = clock.time_calls([(fns[n], sets[i % len(sets)]) for n in order], spent, [spins[n] for n in order])
        for n, t in zip(order, got):
            times[n].append(t)
        for n, t in zip(order, spent):
            host[n].append(t)
    return times, host


def buffer_sets(total_bytes: int, flush_bytes: int, lo: int = 2, hi: int = 16) -> int:
    """How many input sets to rotate through so they do not all fit in the cache together."""
    if total_bytes <= 0:
        return lo
    return max(lo, min(hi, -(-2 * max(flush_bytes, 1) // total_bytes)))


def summary(times: list[float]) -> dict:
    """Median and interquartile spread (relative to the median) of per-call seconds."""
    if not times:
        return {"n": 0}
    med = statistics.median(times)
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [med, med, med]
    return {"n": len(times), "median_s": med, "q1_s": q[0], "q3_s": q[2],
            "rel_iqr": (q[2] - q[0]) / med if med else 0.0}


def rates(amount: float, candidate_s: float, engine_s: float) -> tuple[float, float]:
    """``amount`` (bytes, operations) per second in ``candidate_s`` and in ``engine_s`` (inf and 0 at no time)."""
    return amount / candidate_s if candidate_s > 0 else math.inf, amount / engine_s if engine_s > 0 else 0.0


def copy_ceiling(clock: Clock, repeats: int = 10) -> float:
    """Measured device copy bandwidth, bytes read + written per second (median)."""
    import torch

    n = (512 << 20) if clock.device == "cuda" else (64 << 20)
    src = torch.ones(n, dtype=torch.int8, device=clock.device)
    dst = torch.empty_like(src)
    times = clock.time_calls([(dst.copy_, (src,))] * repeats)
    return 2 * n / statistics.median(times)
