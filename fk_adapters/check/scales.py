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

    lo, hi = st.get("row_rms", (0.0, 0.0))
    if not all(map(math.isfinite, (st["mean"], st["std"], lo, hi))):  # an output recorded before it was written
        return z
    v = st["mean"] + st["std"] * z
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


CACHES = ("k_cache", "v_cache")


def cache_blocks_used(names: list[str], sig: list) -> list:
    """The signature with a paged KV cache cut to the blocks its block table can name (plus the null block 0): a
    kernel reads no other block, and the engine's whole cache (thousands of blocks) would cost seconds per input."""
    by_name = dict(zip(names, sig))
    if "block_table" not in by_name or not all(by_name.get(c) for c in CACHES):
        return sig
    b, rows = by_name["block_table"]["shape"]
    n_blocks = min(by_name["k_cache"]["shape"][0], b * rows + 1)
    return [dict(a, shape=[n_blocks, *a["shape"][1:]]) if n in CACHES else a for n, a in zip(names, sig)]


def pool_slots_used(names: list[str], sig: list) -> list:
    """The signature with a recurrent-state pool cut to the slots its indices can name (plus the free slot 0): the
    engine's whole pool (thousands of slots) would cost seconds per input."""
    by_name = dict(zip(names, sig))
    if not (by_name.get("state_indices") and by_name.get("state")):
        return sig
    slots = min(by_name["state"]["shape"][0], by_name["state_indices"]["shape"][0] + 1)
    return [dict(a, shape=[slots, *a["shape"][1:]]) if n == "state" else a for n, a in zip(names, sig)]


def recurrent_metadata(sig: dict, gen, device) -> dict:
    """Pool slots, sequence starts and initial-state flags that agree with the captured shapes (``sig``: the
    signature by argument name): the T tokens shared by the R sequences, distinct slots from 1 (slot 0 left free, as
    vLLM's null block), about half of the sequences carrying a state."""
    import torch

    r = sig["state_indices"]["shape"][0]
    t = (sig.get("q") or sig["x"])["shape"][0]
    lens = [t // r + (i < t % r) for i in range(r)] if r else []
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n)
    return {"state_indices": torch.randperm(sig["state"]["shape"][0] - 1, generator=gen, device=device)[:r] + 1,
            "cu_seqlens": torch.tensor(starts, device=device),
            "has_initial_state": torch.rand(r, generator=gen, device=device) < 0.5}


def recurrent_gate(name: str, shape, gen, device):
    """The gates of the linear-attention / SSM slots in their own ranges: log decay g < 0, beta in (0, 1), Mamba2's
    A in [-16, -1] and dt_bias giving a softplus'd step in [0.001, 0.1] (its initialisation's ranges)."""
    import torch

    u = torch.rand(tuple(shape), generator=gen, dtype=torch.float64, device=device)
    if name == "g":
        return -(0.01 + 2 * u)
    if name == "beta":
        return 0.02 + 0.96 * u
    if name == "A":
        return -(1 + 15 * u)
    return torch.log(torch.expm1(0.001 + 0.099 * u))  # dt_bias


def attention_metadata(sig: dict, gen, device) -> dict:
    """A block table, key counts and query starts that agree with each other and with the captured shapes
    (``sig``: the signature by argument name): the T query rows shared by the B requests, none over max_query_len,
    each request's keys within its block-table row and the cache, distinct blocks, block 0 left as the null block."""
    import torch

    b, t = sig["seq_lens"]["shape"][0], sig["q"]["shape"][0]
    rows_per_table, (n_blocks, bs) = sig["block_table"]["shape"][1], sig["k_cache"]["shape"][:2]
    max_q = max(int(sig["max_query_len"]["value"]), 1)
    rows = min(t, b * max_q)
    q_lens = [rows // b + (i < rows % b) for i in range(b)]
    blocks_each = max(min(rows_per_table, (n_blocks - 1) // max(b, 1)), 1)
    spare = torch.rand(b, generator=gen, device=device).tolist()
    lens = [n + int(r * max(blocks_each * bs - n, 0)) for n, r in zip(q_lens, spare)]
    order = (torch.randperm(n_blocks - 1, generator=gen, device=device) + 1).tolist()
    table = torch.zeros(b, rows_per_table, dtype=torch.int64)
    used = 0
    for i, n in enumerate(lens):
        need = -(-n // bs)
        table[i, :need] = torch.tensor(order[used:used + need], dtype=torch.int64)
        used += need
    starts = [0]
    for n in q_lens:
        starts.append(starts[-1] + n)
    return {"block_table": table.to(device), "seq_lens": torch.tensor(lens, device=device),
            "query_start_loc": torch.tensor(starts, device=device)}
