"""The paged_attention slot's reference, cases, FLOPs and traffic against independent computations."""
from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from fk_adapters.tasks.attention import PAGED_ATTENTION as SLOT, _pairs

CASES = range(len(SLOT.cases))


def _inputs(index, dtype=torch.float32):
    return SLOT.make_inputs(SLOT.cases[index], dtype, "cpu", torch.Generator().manual_seed(index))


def _logical(cache, table_row, n_keys):
    """A request's keys (or values) [L, Hkv, D], gathered token by token through its block table."""
    bs = cache.shape[1]
    return torch.stack([cache[int(table_row[j // bs]), j % bs] for j in range(n_keys)])


def _independent(q, k_cache, v_cache, table, seq_lens, qsl, max_q, scale, window_left, softcap, out):
    """The same attention by another route: per request and head, SDPA with an explicit mask (no soft-cap)."""
    want = out.clone()
    for b in range(len(seq_lens)):
        s, e, n = int(qsl[b]), int(qsl[b + 1]), int(seq_lens[b])
        if e == s or n == 0:
            continue
        k, v = _logical(k_cache, table[b], n), _logical(v_cache, table[b], n)
        group = q.shape[1] // k.shape[1]
        pos = torch.arange(n - (e - s), n)[:, None]
        key = torch.arange(n)[None, :]
        mask = (key <= pos) & ((key >= pos - window_left) if window_left >= 0 else True)
        for h in range(q.shape[1]):
            want[s:e, h] = F.scaled_dot_product_attention(q[s:e, h][None].double(), k[:, h // group][None].double(),
                                                          v[:, h // group][None].double(), attn_mask=mask,
                                                          scale=scale)[0].to(out.dtype)
    return want


@pytest.mark.parametrize("index", CASES)
def test_reference_is_attention_over_the_gathered_cache(index):
    args = _inputs(index)
    (got,) = SLOT.run_reference(args)
    if args[9] > 0:
        pytest.skip("soft-capped: checked against its own formula below")
    torch.testing.assert_close(got, _independent(*args), atol=1e-5, rtol=1e-5)


def test_softcap_changes_large_scores_and_leaves_small_ones():
    index = next(i for i, c in enumerate(SLOT.cases) if c.get("softcap"))
    args = list(_inputs(index))
    q, cap = args[0], args[9]
    outs = {}
    for scale_q in (30.0, 1e-3):  # scores far above the cap, and far below it (tanh(s / cap) * cap == s there)
        for c in (cap, 0.0):
            args[0], args[9] = q * scale_q, c
            (outs[scale_q, c],) = SLOT.run_reference(tuple(args))
    assert not torch.allclose(outs[30.0, cap], outs[30.0, 0.0], atol=1e-3)
    torch.testing.assert_close(outs[1e-3, cap], outs[1e-3, 0.0], atol=1e-6, rtol=1e-6)


def test_rows_no_request_owns_are_not_written():
    index = next(i for i, c in enumerate(SLOT.cases) if c.get("padded_rows"))
    args = _inputs(index)
    (got,) = SLOT.run_reference(args)
    owned = int(args[5][-1])
    assert (got[owned:] == 7.0).all() and not (got[:owned] == 7.0).any()


def test_the_window_hides_older_keys_only():
    index = next(i for i, c in enumerate(SLOT.cases) if c.get("window"))
    args = list(_inputs(index))
    k_cache, table, lens, qsl, window_left = args[1], args[3], args[4], args[5], args[8]
    bs, rows = k_cache.shape[1], slice(int(qsl[0]), int(qsl[1]))
    n_q, n = rows.stop - rows.start, int(lens[0])
    assert n - n_q - window_left >= bs  # request 0's first block lies before every one of its queries' windows
    (before,) = SLOT.run_reference(tuple(args))
    for block, moves in ((0, False), ((n - 1) // bs, True)):
        k = k_cache.clone()
        k[int(table[0, block])] += 5.0
        args[1] = k
        (after,) = SLOT.run_reference(tuple(args))
        assert torch.allclose(after[rows], before[rows]) != moves, block


@pytest.mark.parametrize("layout", ["interleaved", "k_transposed"])
def test_engine_layouts_are_views_of_the_same_cache(layout):
    """A strided view holding the same keys gives the same output as a contiguous cache."""
    index = next(i for i, c in enumerate(SLOT.cases) if c.get("layout") == layout)
    args = list(_inputs(index))
    assert not args[1].is_contiguous() or not args[2].is_contiguous()
    (strided,) = SLOT.run_reference(tuple(args))
    args[1], args[2] = args[1].contiguous(), args[2].contiguous()
    (plain,) = SLOT.run_reference(tuple(args))
    assert torch.equal(strided, plain)


def test_a_kernel_that_misses_the_newest_key_is_caught():
    args = list(_inputs(0))
    (want,) = SLOT.run_reference(tuple(args))
    args[4] = args[4] - 1  # every request one key short
    (wrong,) = SLOT.run_reference(tuple(args))
    assert (wrong - want).abs().amax() > 1e-2


@pytest.mark.parametrize("seed", range(4))
def test_flops_count_the_attended_pairs(seed):
    rng = random.Random(seed)
    for _ in range(300):
        n_q = rng.randint(1, 20)
        n_k = rng.randint(n_q, 60)
        w = rng.choice([-1, 0, 1, 3, 7, 30, 100])
        pos = torch.arange(n_k - n_q, n_k)[:, None]
        key = torch.arange(n_k)[None, :]
        seen = (key <= pos) & ((key >= pos - w) if w >= 0 else True)
        assert _pairs(n_q, n_k, w) == int(seen.sum()), (n_q, n_k, w)


@pytest.mark.parametrize("index", CASES)
def test_flops_and_traffic_of_the_cases(index):
    args = _inputs(index, torch.bfloat16)
    q, k_cache, v_cache, table, lens, qsl, _, _, window_left, _, out = args
    pairs = 0
    rows = keys = 0
    for b in range(len(lens)):
        n_q, n = int(qsl[b + 1] - qsl[b]), int(lens[b])
        if n_q and n:
            pairs += _pairs(n_q, n, window_left)
            rows += n_q
            keys += n if window_left < 0 else min(n, n_q + window_left)
    assert SLOT.flops(*args) == 2 * q.shape[1] * (q.shape[2] + v_cache.shape[-1]) * pairs
    kv = keys * k_cache.shape[2] * (k_cache.shape[-1] + v_cache.shape[-1]) * 2
    least = rows * q.shape[1] * (q.shape[2] + out.shape[2]) * 2 + kv
    assert least < SLOT.traffic(*args) <= least + 4 * (table.numel() + len(lens) + len(qsl))


def test_signature_and_schema_agree():
    assert SLOT.param_names() == ["q", "k_cache", "v_cache", "block_table", "seq_lens", "query_start_loc",
                                  "max_query_len", "scale", "window_left", "softcap", "out"]
    assert SLOT.mutated_positions() == (10,) and "Tensor(a!) out" in SLOT.schema


@pytest.mark.parametrize("index", CASES)
def test_fk_check_draws_consistent_metadata_from_a_captured_signature(index):
    """fk check makes fresh inputs from a capture's shapes: the block table, lengths and query starts it draws
    must make sense together (the reference runs, every request's keys sit in distinct blocks of the cache)."""
    from fk_adapters.call_signature import describe
    from fk_adapters.check import signature

    sig = describe(_inputs(index))
    args = signature.make_inputs(SLOT, sig, "cpu", seed=3)
    q, k_cache, _, table, lens, qsl, max_q = args[:7]
    bs = k_cache.shape[1]
    q_lens = (qsl[1:] - qsl[:-1]).tolist()
    assert max(q_lens) <= max_q and int(qsl[-1]) <= q.shape[0] and all(n >= 0 for n in q_lens)
    used = [b for i, n in enumerate(lens.tolist()) for b in table[i, : -(-n // bs)].tolist()]
    assert len(used) == len(set(used)) and 0 not in used and max(used, default=0) < k_cache.shape[0]
    assert all(n >= m for n, m in zip(lens.tolist(), q_lens))
    (out,) = SLOT.run_reference(args)
    assert torch.isfinite(out[: int(qsl[-1])]).all()
