"""The value scales ``fk check`` draws a slot's activation arguments at, one correctness round each.

Activation arguments are every floating tensor but the weights and the tables of ``value_stats.FIXED``
(rotary positions and cos/sin cache, a MoE layer's routing keep their own values; weight matrices are drawn at
a trained layer's scale, ``matrix``). The scales:

- ``captured``: the engine's real inputs, from the signature's ``value_stats`` (``fk capture``):
  N(mean, std), each row then rescaled to an RMS within the recorded row RMS range, the first row
  at its smallest, the last at its largest;
- ``normal``: N(0, 1), where the workload has no value statistics;
- ``tiny``: N(0, 1) x 3e-4: a mean square near 1e-7, below a norm's eps (1e-6..1e-5), which then
  decides the result (a kernel that drops eps fails here);
- ``large``: N(0, 1) x 1e3, less where the dtype needs it: a result that grows as the inputs'
  ``Slot.growth``-th power stays below a quarter of the dtype's largest value;
- ``outlier-row``: the base scale (captured, else normal) with one row multiplied as ``large``.

The base scale runs ``rounds`` times; the edge scales run once each, always.
"""
from __future__ import annotations

import math

EDGES = ("tiny", "large", "outlier-row")
TINY, LARGE = 3e-4, 1e3


def base(stats: dict | None) -> str:
    return "captured" if stats else "normal"


def plan(stats: dict | None, rounds: int) -> list[str]:
    """The scale of each correctness round of one signature."""
    return [base(stats)] * rounds + list(EDGES)


def unit(shape, gen, device):
    """N(0, 1) in float64, never within 1e-3 of zero."""
    import torch

    x = torch.randn(math.prod(shape), generator=gen, dtype=torch.float64, device=device)
    return torch.where(x.abs() < 1e-3, torch.full_like(x, 1e-3), x).reshape(tuple(shape))


def _headroom(dtype, growth: int) -> float:
    """The largest magnitude an input may take so that a result growing as its ``growth``-th power fits."""
    import torch

    return (torch.finfo(dtype).max / 4) ** (1 / max(growth, 1))


def _amplify(x, dtype, growth: int):
    """``x`` (not empty) times ``LARGE``, or less so that its largest element stays within the headroom."""
    return x * (_headroom(dtype, growth) / x.abs().max().clamp_min(1e-300)).clamp(max=LARGE)


def _captured(z, st: dict, gen):
    """``z`` (unit normal) moved to the recorded mean and std, rows rescaled into the recorded RMS range."""
    import torch

    v = st["mean"] + st["std"] * z
    lo, hi = st.get("row_rms", (0.0, 0.0))
    if not st.get("abs_max"):  # all-zero recorded inputs: nothing to scale to
        return z
    if not hi > 0:
        return v
    rows = v.reshape(-1, v.shape[-1])
    lo = max(lo, hi * 1e-6)
    target = torch.empty(rows.shape[0], dtype=torch.float64, device=v.device)
    target.uniform_(math.log(lo), math.log(hi), generator=gen).exp_()
    target[0] = lo
    if rows.shape[0] > 1:
        target[-1] = hi
    rms = rows.pow(2).mean(dim=-1).sqrt().clamp_min(1e-300)
    return (rows * (target / rms)[:, None]).reshape(v.shape)


def activation(shape, dtype, scale: str, gen, device, stats: dict | None, growth: int, row: int):
    """Float64 values of one activation argument at ``scale``; ``stats``: this argument's recorded
    statistics or None; ``row``: which row ``outlier-row`` amplifies (modulo the rows)."""
    z = unit(shape, gen, device)
    if not z.numel() or scale == "normal":
        return z
    if scale == "tiny":
        return TINY * z
    if scale == "large":
        return _amplify(z, dtype, growth)
    v = _captured(z, stats, gen) if stats else z
    if scale == "outlier-row":
        rows = v.reshape(-1, v.shape[-1])
        r = row % rows.shape[0]
        rows[r] = _amplify(rows[r], dtype, growth)
        v = rows.reshape(v.shape)
    return v


def matrix(shape, gen, device, stats: dict | None):
    """A layer's weight matrix (or a stack of them), fan-in last: N(mean, std) of the recorded weight, else
    N(0, 1 / fan-in), a trained layer's scale: x @ w.T keeps x's magnitude, as ``Slot.growth`` assumes."""
    import torch

    w = torch.randn(tuple(shape), generator=gen, dtype=torch.float64, device=device)
    return stats["mean"] + stats["std"] * w if stats else w / math.sqrt(max(shape[-1], 1))


def expert_ids(shape, experts: int, gen, device):
    """A router's choice: ``shape[-1]`` distinct experts in [0, ``experts``) per token, uniformly (int64)."""
    import torch

    scores = torch.rand((math.prod(shape[:-1]), experts), generator=gen, dtype=torch.float64, device=device)
    return scores.topk(min(shape[-1], experts), dim=-1).indices.reshape(tuple(shape))


def router_weights(shape, gen, device):
    """A router's top-k weights: positive, each token's summing to 1 (renormalised)."""
    import torch

    w = 0.05 + torch.rand(tuple(shape), generator=gen, dtype=torch.float64, device=device)
    return w / w.sum(dim=-1, keepdim=True)


def weight(shape, gen, device, stats: dict | None):
    """A norm weight: N(mean, std) of the recorded weight, else 1 + 0.2 N(0, 1)."""
    import torch

    w = torch.randn(tuple(shape), generator=gen, dtype=torch.float64, device=device)
    return stats["mean"] + stats["std"] * w if stats else 1.0 + 0.2 * w
