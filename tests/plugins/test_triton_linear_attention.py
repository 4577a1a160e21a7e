"""The example Triton plugin's gated delta rule and Mamba2 SSD kernels (prefill and decode) against their slots'
references, on every case of each slot.

Without a GPU they run in Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py) in float32 (every case,
K = V = 128 included: a second or less each); on a GPU in bfloat16 as well, and captured in a CUDA graph.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from _cuda_graph import capture_and_replay, clone_args  # noqa: E402

from fk_adapters.tasks.linear_attention import (  # noqa: E402
    GATED_DELTA_RULE,
    GATED_DELTA_RULE_DECODE,
    SSD_CHUNK_SCAN,
    SSM_STATE_UPDATE,
)

if importlib.util.find_spec("fk_triton_kernels") is None:  # not installed: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "fk-triton"))

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

SLOTS = (GATED_DELTA_RULE, GATED_DELTA_RULE_DECODE, SSD_CHUNK_SCAN, SSM_STATE_UPDATE)
PREFILL = (GATED_DELTA_RULE, SSD_CHUNK_SCAN)
CASES = [(slot, i) for slot in SLOTS for i in range(len(slot.cases))]
CASE_IDS = [f"{slot.name}-{i}" for slot, i in CASES]


def _kernel(slot):
    from fk_triton_kernels import linear_attention

    return getattr(linear_attention, slot.name)


def _pos(slot, name):
    return slot.param_names().index(name)


def _inputs(slot, case, dtype, seed=0):
    return slot.make_inputs(case, dtype, DEVICE, torch.Generator().manual_seed(seed))


def _run(slot, args):
    """(state, out) the kernel leaves, from copies of ``args``."""
    got = clone_args(args)
    _kernel(slot)(*got)
    return tuple(got[i] for i in slot.mutated_positions())


def _assert_close(slot, got, want, atol, rtol):
    """``state`` within (atol, rtol), or within a bf16 rounding of it where the pool is bfloat16 (the kernel and the
    reference may round a value near a rounding boundary to neighbouring bf16 values); ``out`` within (atol, rtol),
    its untouched rows (exactly 7.0) included."""
    (state, out), (want_state, want_out) = got, want
    assert state.dtype == want_state.dtype and out.dtype == want_out.dtype
    if state.dtype == torch.bfloat16:
        torch.testing.assert_close(state.float(), want_state.float(), atol=max(atol, 1e-5), rtol=max(rtol, 1e-2))
    else:
        torch.testing.assert_close(state, want_state, atol=atol, rtol=rtol)
    torch.testing.assert_close(out.float(), want_out.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize(("slot", "index"), CASES, ids=CASE_IDS)
def test_matches_the_reference_float32(slot, index):
    args = _inputs(slot, slot.cases[index], torch.float32, index)
    _assert_close(slot, _run(slot, args), slot.run_reference(args), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("slot", SLOTS, ids=lambda s: s.name)
def test_skipped_sequences_leave_state_and_out_untouched(slot):
    """A sequence at index -1 reads and writes nothing: its out rows keep their 7.0, the pool's slots that no live
    sequence owns keep their bits; and with every index -1 the call changes nothing at all."""
    index = next(i for i, c in enumerate(slot.cases) if "skip" in c)
    case = slot.cases[index]
    args = _inputs(slot, case, torch.float32, index)
    state0, idx = args[_pos(slot, "state")], args[_pos(slot, "state_indices")]
    state, out = _run(slot, args)
    first = sum(case["lens"][:case["skip"]])
    assert torch.equal(out[first:first + case["lens"][case["skip"]]],
                       torch.full_like(out[first:first + case["lens"][case["skip"]]], 7.0))
    unowned = [s for s in range(state.shape[0]) if s not in idx.tolist()]
    assert torch.equal(state[unowned], state0[unowned])
    assert not torch.equal(out, args[-1]) and not torch.equal(state, state0)  # the live sequences did run

    args = list(args)
    args[_pos(slot, "state_indices")] = torch.full_like(idx, -1)
    state, out = _run(slot, tuple(args))
    assert torch.equal(state, state0) and torch.equal(out, args[-1])


@pytest.mark.parametrize("slot", PREFILL, ids=lambda s: s.name)
def test_fresh_sequences_do_not_read_their_slot(slot):
    """has_initial_state False: the sequence starts from zeros, so NaN in its slot must not reach anything."""
    index = next(i for i, c in enumerate(slot.cases) if not all(c["init"]))
    args = _inputs(slot, slot.cases[index], torch.float32, index)
    state, idx, flags = (args[_pos(slot, n)] for n in ("state", "state_indices", "has_initial_state"))
    for n, s in enumerate(idx.tolist()):
        if s >= 0 and not bool(flags[n]):
            state[s] = float("nan")
    got = _run(slot, args)
    assert torch.isfinite(got[0][idx[idx >= 0].long()]).all() and torch.isfinite(got[1]).all()
    _assert_close(slot, got, slot.run_reference(args), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("slot", PREFILL, ids=lambda s: s.name)
def test_no_has_initial_state_means_every_sequence_from_its_slot(slot):
    args = list(_inputs(slot, slot.cases[0], torch.float32))
    args[_pos(slot, "has_initial_state")] = None
    _assert_close(slot, _run(slot, tuple(args)), slot.run_reference(tuple(args)), atol=1e-4, rtol=1e-4)


# Sizes that are no powers of two (the kernels' masks), KDA's per-key decay among them.
ODD_CASES = {
    "gated_delta_rule": {"lens": (3, 5), "h": 2, "hv": 4, "k": 12, "v": 20, "init": (True, False), "slots": 4,
                         "per_key_decay": True},
    "gated_delta_rule_decode": {"lens": (1, 1, 1), "h": 1, "hv": 3, "k": 24, "v": 10, "slots": 4, "skip": 1},
    "ssd_chunk_scan": {"lens": (3, 5), "h": 6, "p": 10, "g": 3, "n": 12, "init": (True, False), "slots": 4},
    "ssm_state_update": {"lens": (1, 1, 1), "h": 6, "p": 10, "g": 2, "n": 12, "slots": 4, "skip": 0},
}


def _row_padded(t):
    """``t``'s values in a view whose last dimension is contiguous and whose other strides are not (a slice of a
    wider packed tensor, as the engines pass q, k, v or x, B, C); NaN around it."""
    base = torch.full((*t.shape[:-1], t.shape[-1] + 5), float("nan"), dtype=t.dtype, device=t.device)
    view = base[..., 2:2 + t.shape[-1]]
    view.copy_(t)
    return view


def _column_major(t):
    """``t``'s values with no contiguous dimension at all (beta, dt: read one element at a time)."""
    return t.t().contiguous().t() if t.dim() == 2 else t


def _strided(slot, args):
    """``args`` with the same values in the layouts the engines pass: sliced activations, a state pool that is a view
    of a wider one, 2-D state indices sliced to a column (vLLM's Mamba2 decode), ``out`` a slice."""
    args = list(args)
    for name in ("q", "k", "v", "x", "B", "C", "out"):
        if name in slot.param_names():
            args[_pos(slot, name)] = _row_padded(args[_pos(slot, name)])
    for name in ("beta", "dt"):
        if name in slot.param_names():
            args[_pos(slot, name)] = _column_major(args[_pos(slot, name)])
    if "g" in slot.param_names():
        g = args[_pos(slot, "g")]
        args[_pos(slot, "g")] = _row_padded(g) if g.dim() == 3 else _column_major(g)
    state = args[_pos(slot, "state")]
    pool = torch.full((state.shape[0], 2, *state.shape[1:]), float("nan"), dtype=state.dtype, device=state.device)
    pool[:, 1] = state
    args[_pos(slot, "state")] = pool[:, 1]
    idx = args[_pos(slot, "state_indices")]
    args[_pos(slot, "state_indices")] = torch.stack([idx, torch.zeros_like(idx)], 1)[:, 0]
    return tuple(args)


@pytest.mark.parametrize("slot", SLOTS, ids=lambda s: s.name)
def test_strided_views_and_sizes_that_are_no_powers_of_two(slot):
    args = _inputs(slot, ODD_CASES[slot.name], torch.float32, 3)
    strided = _strided(slot, args)
    assert strided[0].stride() != args[0].stride() and not strided[_pos(slot, "state")].is_contiguous()
    _kernel(slot)(*strided)
    got = tuple(strided[i] for i in slot.mutated_positions())
    _assert_close(slot, got, slot.run_reference(args), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU")
@pytest.mark.parametrize(("slot", "index"), CASES, ids=CASE_IDS)
def test_matches_the_reference_bfloat16(slot, index):
    args = _inputs(slot, slot.cases[index], torch.bfloat16, index)
    _assert_close(slot, _run(slot, args), slot.run_reference(args), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU")
@pytest.mark.parametrize("slot", SLOTS, ids=lambda s: s.name)
def test_cuda_graph_capture_and_replay(slot):
    """Captured once, replayed with new activations, states and indices: the reference answer for those (the
    decode wrappers are what the engines capture; the prefill ones read nothing on the host either)."""
    for case in slot.cases:
        _, got, want = capture_and_replay(slot, _kernel(slot), case)
        for g, w in zip(got, want):
            if g.dtype == torch.bfloat16:
                torch.testing.assert_close(g.float(), w.float(), atol=1e-4, rtol=1e-2)
            else:
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
