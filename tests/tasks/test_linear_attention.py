"""The gated delta rule and SSD slots' references against properties that follow from their recurrences alone."""
from __future__ import annotations

import pytest
import torch

from fk_adapters.tasks.linear_attention import (
    GATED_DELTA_RULE as PREFILL,
    GATED_DELTA_RULE_DECODE as DECODE,
    SSD_CHUNK_SCAN as SCAN,
    SSM_STATE_UPDATE as UPDATE,
)


def _inputs(slot, index, dtype=torch.float32):
    return slot.make_inputs(slot.cases[index], dtype, "cpu", torch.Generator().manual_seed(index))


@pytest.mark.parametrize("slot", [PREFILL, DECODE], ids=lambda s: s.name)
def test_schema_and_cases(slot):
    schema_args = [a.strip().split()[-1] for a in slot.schema.split("->")[0].strip("() ").split(",")]
    assert schema_args == slot.param_names() and [slot.param_names()[i] for i in slot.mutated_positions()] == [
        "state", "out"]
    for i in range(len(slot.cases)):
        args = _inputs(slot, i)
        state, out = slot.run_reference(args)
        assert torch.isfinite(state).all() and torch.isfinite(out).all()
        assert slot.flops(*args) > 0 and slot.traffic(*args) > 0


def test_a_key_written_with_full_strength_and_no_decay_is_recalled_exactly():
    """beta = 1, g = 0, a fresh state: h = v k^T; querying with k (unit norm) reads v back, the delta rule's point."""
    k = torch.nn.functional.normalize(torch.randn(2, 1, 8), dim=-1)
    k[1] = torch.nn.functional.normalize(k[1] - (k[1] * k[0]).sum() * k[0], dim=-1)  # orthogonal to k[0]
    v = torch.randn(2, 1, 4)
    q = torch.stack([k[0], k[1]])  # token 1 asks for what token 0 stored... and its own
    state, out = torch.zeros(1, 1, 4, 8), torch.zeros(2, 1, 4)
    PREFILL.reference(q, k, v, torch.zeros(2, 1), torch.ones(2, 1), state, torch.tensor([0], dtype=torch.int32),
                      torch.tensor([0, 2], dtype=torch.int32), torch.tensor([False]), 1.0, False, out)
    torch.testing.assert_close(out[0], v[0])
    torch.testing.assert_close(out[1], v[1])
    torch.testing.assert_close(state[0, 0], v[0, 0][:, None] * k[0, 0] + v[1, 0][:, None] * k[1, 0])


def test_a_prefill_split_in_two_equals_the_whole_prefill():
    q, k, v, g, beta, state, idx, cu, init, scale, l2, out = _inputs(PREFILL, 1)
    whole_state, whole_out = state.clone(), out.clone()
    PREFILL.reference(q, k, v, g, beta, whole_state, idx, cu, init, scale, l2, whole_out)
    for part in (slice(0, 3), slice(3, 7)):
        n = part.stop - part.start
        PREFILL.reference(q[part], k[part], v[part], g[part], beta[part], state, idx,
                          torch.tensor([0, n], dtype=torch.int32), None, scale, l2, out[part])
    torch.testing.assert_close(out, whole_out)
    torch.testing.assert_close(state, whole_state)


def test_decode_is_the_prefill_with_one_token_per_sequence():
    q, k, v, g, beta, state, idx, scale, l2, out = _inputs(DECODE, 0)
    s2, o2 = state.clone(), out.clone()
    DECODE.reference(q, k, v, g, beta, state, idx, scale, l2, out)
    PREFILL.reference(q, k, v, g, beta, s2, idx, torch.arange(4, dtype=torch.int32), None, scale, l2, o2)
    torch.testing.assert_close((state, out), (s2, o2))


def test_a_skipped_sequence_reads_and_writes_nothing_and_a_fresh_one_ignores_its_slot():
    q, k, v, g, beta, state, idx, cu, init, scale, l2, out = _inputs(PREFILL, 2)  # sequence 1 skipped, 2 fresh
    before = state.clone()
    PREFILL.reference(q, k, v, g, beta, state, idx, cu, init, scale, l2, out)
    s1, s2 = int(cu[1]), int(cu[2])
    assert bool((out[s1:s2] == 7.0).all())
    touched = {int(i) for i in idx if i >= 0}
    for slot in range(state.shape[0]):
        assert torch.equal(state[slot], before[slot]) == (slot not in touched)
    garbage = before.clone()
    garbage[int(idx[2])] = 1e6  # a fresh sequence never reads its slot
    out2 = torch.full_like(out, 7.0)
    PREFILL.reference(q, k, v, g, beta, garbage, idx, cu, init, scale, l2, out2)
    torch.testing.assert_close(out2[s2:], out[s2:])


def test_full_decay_forgets_the_state():
    """g = -inf at a token: exp(g) = 0, so what came before (the slot's state) no longer matters."""
    q, k, v, g, beta, state, idx, cu, init, scale, l2, out = _inputs(PREFILL, 1)
    g = g.clone()
    g[0] = float("-inf")
    a, b = out.clone(), out.clone()
    PREFILL.reference(q, k, v, g, beta, state.clone(), idx, cu, init, scale, l2, a)
    PREFILL.reference(q, k, v, g, beta, state.clone(), idx, cu, torch.tensor([False]), scale, l2, b)
    torch.testing.assert_close(a, b)


def test_per_key_decay_with_equal_channels_is_the_per_head_decay():
    q, k, v, g, beta, state, idx, cu, init, scale, l2, out = _inputs(PREFILL, 3)  # KDA: g [T, HV, K]
    per_head = g[..., 0]
    same = per_head[..., None].expand_as(g).contiguous()
    a, b = out.clone(), out.clone()
    PREFILL.reference(q, k, v, same, beta, state.clone(), idx, cu, init, scale, l2, a)
    PREFILL.reference(q, k, v, per_head, beta, state.clone(), idx, cu, init, scale, l2, b)
    torch.testing.assert_close(a, b)


def test_flops_and_traffic_count_only_live_sequences():
    args = _inputs(PREFILL, 2)  # lens 4, 2, 6 with sequence 1 skipped: 10 live tokens
    q, k, v, g, beta, state, idx, cu, init, *_ = args
    assert PREFILL.flops(*args) == 7 * 10 * 2 * 32 * 16
    per_state = state[0].numel() * state.element_size()
    reads = 1  # live sequences 0 (from its slot) and 2 (fresh): one state read, two written
    per_token = sum(x[0].numel() * x.element_size() for x in (q, k, v, g, beta, args[-1]))
    assert PREFILL.traffic(*args) == (10 * per_token + (2 + reads) * per_state + idx.numel() * 4 + cu.numel() * 4
                                      + init.numel())


@pytest.mark.parametrize("slot", [SCAN, UPDATE], ids=lambda s: s.name)
def test_ssd_schema_and_cases(slot):
    test_schema_and_cases(slot)


def test_ssd_one_token_from_zeros_is_its_own_outer_product():
    """A fresh state, one token: h = (d x) B^T, so out = (d x)(B . C) + D x, with d = softplus(dt + dt_bias)."""
    x, dt, a, b, c, d, dt_bias, state, idx, cu, init, out = _inputs(SCAN, 0)
    one = slice(0, 1)
    o = out[one].clone()
    SCAN.reference(x[one], dt[one], a, b[one], c[one], d, dt_bias, state.clone(), idx[:1],
                   torch.tensor([0, 1], dtype=torch.int32), torch.tensor([False]), o)
    step = torch.nn.functional.softplus(dt[0] + dt_bias)  # [H]
    r = x.shape[1] // b.shape[1]
    bc = (b[0] * c[0]).sum(-1).repeat_interleave(r)  # [H]
    torch.testing.assert_close(o[0], (step * bc)[:, None] * x[0] + d[:, None] * x[0])


def test_ssd_prefill_split_in_two_and_decode_agree_with_the_whole():
    x, dt, a, b, c, d, dt_bias, state, idx, cu, init, out = _inputs(SCAN, 2)  # one sequence of 7, from its slot
    whole_state, whole_out = state.clone(), out.clone()
    SCAN.reference(x, dt, a, b, c, d, dt_bias, whole_state, idx, cu, init, whole_out)
    SCAN.reference(x[:4], dt[:4], a, b[:4], c[:4], d, dt_bias, state, idx, torch.tensor([0, 4], dtype=torch.int32),
                   None, out[:4])
    for t in range(4, 7):  # the rest one decode step at a time
        UPDATE.reference(x[t:t + 1], dt[t:t + 1], a, b[t:t + 1], c[t:t + 1], d, dt_bias, state, idx, out[t:t + 1])
    torch.testing.assert_close((state, out), (whole_state, whole_out))


def test_ssd_skipped_sequences_and_fresh_starts():
    x, dt, a, b, c, d, dt_bias, state, idx, cu, init, out = _inputs(SCAN, 1)  # sequence 1 skipped, 2 fresh
    before = state.clone()
    SCAN.reference(x, dt, a, b, c, d, dt_bias, state, idx, cu, init, out)
    assert bool((out[int(cu[1]):int(cu[2])] == 7.0).all())
    touched = {int(i) for i in idx if i >= 0}
    for s in range(state.shape[0]):
        assert torch.equal(state[s], before[s]) == (s not in touched)
    garbage = before.clone()
    garbage[int(idx[2])] = 1e6
    again = torch.full_like(out, 7.0)
    SCAN.reference(x, dt, a, b, c, d, dt_bias, garbage, idx, cu, init, again)
    torch.testing.assert_close(again[int(cu[2]):], out[int(cu[2]):])


def test_ssd_flops_count_live_tokens():
    args = _inputs(SCAN, 1)  # lens 4, 2, 6, sequence 1 skipped; H 2, P 16, N 8
    assert SCAN.flops(*args) == 10 * 2 * 16 * (5 * 8 + 2)
