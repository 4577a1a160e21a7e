"""Value statistics of the real inputs a slot receives, recorded by ``fk capture`` per signature.

For every floating tensor argument: mean, std, largest magnitude, share of exact zeros, and the
spread of its rows' RMS (a row: the last dimension). Sampled (the first ``FIRST`` calls of a
signature, then every ``EVERY``-th) and summed on the tensor's device with no host sync, so a
sampled call costs a few reductions; nothing is recorded while a CUDA graph is being captured.
The host reads the sums once, at ``export`` (the probe snapshot).
"""
from __future__ import annotations

import math

FIRST, EVERY = 8, 64
# While this file exists in the run folder ($FK_RUN_DIR), no call is recorded: the driver's profiled steps, whose
# device time must be the engine's own, not these reductions' (seen on an H100: a third of a capture's profile).
PAUSE_FILE = "values-paused"
# Tables, indices, expert weight stacks, the engine's KV caches and state pools, and outputs not yet written: not
# activations, so neither recorded (a sampled call would copy a whole expert stack or KV cache to float32: seen
# slowing a CPU capture of tiny-llama tenfold) nor rescaled.
FIXED = ("positions", "cos_sin_cache", "topk_ids", "topk_weights", "w13", "w2", "k_cache", "v_cache", "state", "out")
# The device vector of one argument: sums first (added), then maxima (kept).
_SUMS = ("sum", "sumsq", "zeros")
_MAXES = ("abs_max", "rms_max", "neg_rms_min")


def sampled(calls: int) -> bool:
    """Whether the ``calls``-th call of a signature (counted from 1) is sampled."""
    return calls <= FIRST or calls % EVERY == 0


def _vector(t):
    """One call's sums and maxima for tensor ``t``, on its device."""
    import torch

    xf = t.detach().float()
    rows = xf.reshape(-1, xf.shape[-1]) if xf.dim() else xf.reshape(1, 1)
    rms = rows.pow(2).mean(dim=-1, dtype=torch.float64).sqrt()
    return torch.stack([xf.sum(dtype=torch.float64), xf.pow(2).sum(dtype=torch.float64),
                        (xf == 0).sum().double(), xf.abs().max().double(), rms.max(), -rms.min()])


def paused(run_dir: str | None) -> bool:
    """Whether the driver of the run in ``run_dir`` ($FK_RUN_DIR) has paused the recording."""
    import os

    return bool(run_dir) and os.path.exists(os.path.join(run_dir, PAUSE_FILE))


def _capturing_graph(t) -> bool:
    import torch

    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def record(store: dict, key: str, names: list[str], args, calls: int, run_dir: str | None = None) -> None:
    """Add the floating tensors of one call to ``store[key][name]`` if this call is sampled.

    ``store[key][name]`` is ``[elements, sampled calls, device vector]``.
    """
    import torch

    if not sampled(calls) or paused(run_dir):
        return
    tensors = [(n, a) for n, a in zip(names, args) if n not in FIXED and isinstance(a, torch.Tensor)
               and a.is_floating_point() and a.numel()]
    if not tensors or any(_capturing_graph(a) for _, a in tensors):
        return
    per_arg = store.setdefault(key, {})
    for name, t in tensors:
        vec = _vector(t)
        acc = per_arg.get(name)
        if acc is None:
            per_arg[name] = [t.numel(), 1, vec]
        else:
            k = len(_SUMS)
            acc[0], acc[1] = acc[0] + t.numel(), acc[1] + 1
            acc[2] = torch.cat([acc[2][:k] + vec[:k], torch.maximum(acc[2][k:], vec[k:])])


def export(store: dict) -> dict:
    """``{slot: {key: {arg: raw sums}}}`` as plain numbers (one host read per argument)."""
    out: dict = {}
    for slot, per_key in store.items():
        for key, per_arg in per_key.items():
            for name, (n, calls, vec) in per_arg.items():
                raw = dict(zip(_SUMS + _MAXES, vec.tolist()), elements=n, calls=calls)
                out.setdefault(slot, {}).setdefault(key, {})[name] = raw
    return out


def merge(snapshots: list[dict] | None) -> dict:
    """``{slot: {key: {arg: raw sums}}}`` over per-process probe snapshots (sums added, maxima kept)."""
    out: dict = {}
    for snap in snapshots or []:
        for slot, per_key in snap.get("value_stats", {}).items():
            for key, per_arg in per_key.items():
                for name, raw in per_arg.items():
                    have = out.setdefault(slot, {}).setdefault(key, {}).get(name)
                    if have is None:
                        out[slot][key][name] = dict(raw)
                        continue
                    for f in _SUMS + ("elements", "calls"):
                        have[f] += raw[f]
                    for f in _MAXES:
                        have[f] = max(have[f], raw[f])
    return out


def summarise(raw: dict) -> dict:
    """What a workload file keeps of one argument's raw sums."""
    n = raw["elements"]
    mean = raw["sum"] / n
    return {"mean": mean, "std": math.sqrt(max(raw["sumsq"] / n - mean * mean, 0.0)), "abs_max": raw["abs_max"],
            "zeros": raw["zeros"] / n, "row_rms": [-raw["neg_rms_min"], raw["rms_max"]], "sampled_calls": raw["calls"]}


def describe(stats: dict | None, skip=("weight",)) -> str:
    """One short line of a signature's captured statistics (activations only), for reports."""
    if not stats:
        return "-"
    parts = []
    for name, s in stats.items():
        if name in skip:
            continue
        lo, hi = s.get("row_rms", [0.0, 0.0])
        parts.append(f"{name} σ {s['std']:.2g} peak {s['abs_max']:.2g} rms {lo:.2g}–{hi:.2g}"
                     + (f" {s['zeros']:.0%} zeros" if s.get("zeros") else ""))
    return "; ".join(parts) or "-"
