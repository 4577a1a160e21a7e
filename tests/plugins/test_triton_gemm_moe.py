"""The example Triton plugin's gemm and fused_moe against the slots' references.

Without a GPU they run in Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py) on tiny float32
shapes; the catalog's own cases (up to 4096 x 4096) run on a GPU only.
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

from fk_adapters.tasks import SLOTS  # noqa: E402

if importlib.util.find_spec("fk_triton_kernels") is None:  # not installed: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "fk-triton"))

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {"atol": 1e-5, "rtol": 1e-5}

if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)


def _gemm():
    from fk_triton_kernels.gemm import gemm

    return gemm


def _moe():
    from fk_triton_kernels import moe

    return moe


def _check(slot, fn, case, seed, dtype=torch.float32, tol=TOL):
    args = SLOTS[slot].make_inputs(case, dtype, DEVICE, torch.Generator().manual_seed(seed))
    got, want = fn(*clone_args(args)), SLOTS[slot].reference(*clone_args(args))
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, **tol)
    return got, want


# ----------------------------------------------------------------------------- gemm

GEMM_TINY = [{"tokens": 7, "k": 40, "n": 50, "bias": True},  # every dim ragged against the tiles
             {"tokens": 1, "k": 64, "n": 32, "bias": False},
             {"tokens": 37, "k": 70, "n": 96, "bias": True},  # several row and column tiles, a partial K tile
             {"tokens": 300, "k": 96, "n": 8, "bias": False}]  # a router: the narrow buckets' tiles


@pytest.mark.parametrize("index", range(len(GEMM_TINY)))
def test_gemm_tiny_cases_match_the_reference(index):
    _check("gemm", _gemm(), GEMM_TINY[index], index)


def test_gemm_strided_operands_and_leading_dims():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(24, 5, generator=gen).t().to(DEVICE)  # [5, 24], columns strided
    w = torch.randn(40, 24, generator=gen).to(DEVICE)
    wt = torch.randn(24, 40, generator=gen).t().to(DEVICE)  # [40, 24], a transposed weight
    bias = torch.randn(40, generator=gen).to(DEVICE)
    ref = SLOTS["gemm"].reference
    for weight in (w, wt):
        torch.testing.assert_close(_gemm()(x, weight, bias), ref(x, weight, bias), **TOL)
    x3 = torch.randn(2, 3, 24, generator=gen).to(DEVICE)
    out = _gemm()(x3, w, None)
    assert out.shape == (2, 3, 40)
    torch.testing.assert_close(out, ref(x3.reshape(6, 24), w, None).reshape(2, 3, 40), **TOL)


def test_gemm_without_rows_or_inner_dim():
    w, bias = torch.ones(8, 4, device=DEVICE), torch.arange(8.0, device=DEVICE)
    assert _gemm()(torch.ones(0, 4, device=DEVICE), w, bias).shape == (0, 8)
    assert torch.equal(_gemm()(torch.ones(3, 0, device=DEVICE), torch.ones(8, 0, device=DEVICE), bias),
                       bias.expand(3, 8))


# ----------------------------------------------------------------------------- fused_moe

def _moe_case(**kw):
    return {"tokens": 6, "hidden": 48, "inter": 40, "experts": 4, "topk": 2, "activation": "silu", **kw}


MOE_TINY = {
    "silu": _moe_case(),
    "gelu-scaled-x-weights": _moe_case(activation="gelu", scaling=2.5, weights="x"),
    "swigluoai-biases-padded": _moe_case(activation="swigluoai", bias=True, padded=2),
    "gelu_tanh-on-input-int64": _moe_case(activation="gelu_tanh", topk=1, on_input=True, ids="int64"),
    "one-expert-over-blocks": _moe_case(tokens=40, experts=3, topk=2),  # 80 pairs: blocks of 16 per expert
    "all-padded": _moe_case(tokens=2, padded=2),
}


@pytest.mark.parametrize("name", list(MOE_TINY))
def test_fused_moe_tiny_cases_match_the_reference(name):
    got, _ = _check("fused_moe", _moe().fused_moe, MOE_TINY[name], len(name))
    if name == "all-padded":
        assert not got.any()


def test_fused_moe_skips_ids_outside_the_experts():
    """-1 (CUDA-graph padding) and E or more (another rank's experts) contribute nothing, wherever they sit."""
    slot = SLOTS["fused_moe"]
    args = list(slot.make_inputs(_moe_case(tokens=9, topk=3), torch.float32, DEVICE, torch.Generator().manual_seed(5)))
    args[4][0, 1], args[4][3, 0], args[4][7, 2] = -1, 4, 11
    torch.testing.assert_close(_moe().fused_moe(*clone_args(args)), slot.reference(*clone_args(args)), **TOL)


def test_the_moe_bucket_follows_the_pairs_per_expert_and_each_bucket_has_its_tiles():
    moe = _moe()
    assert [moe.moe_bucket(p, 8) for p in (1, 128, 129, 512, 513, 2048, 2049)] == [16, 16, 64, 64, 256, 256, 1 << 30]
    assert set(moe._BUCKET_TILES) == set(moe._BUCKETS)
    assert all((64, 64, 4, 3) in tiles for tiles in moe._BUCKET_TILES.values())  # the untuned tile stays a choice


def test_narrow_outputs_have_their_own_gemm_buckets_of_narrow_tiles():
    from fk_triton_kernels import gemm

    wide = [gemm.m_bucket(m, 4096) for m in (1, 16, 17, 64, 65, 256, 257)]
    narrow = [gemm.m_bucket(m, 8) for m in (1, 16, 17, 256, 257, 8192)]
    assert wide == [0, 0, 1, 1, 2, 2, 3] and narrow == [4, 4, 5, 5, 6, 6]
    assert all(n == 16 for b in set(narrow) for _, n, *_ in gemm._tiles(b) if b != 4)


def test_sort_by_expert_places_every_routed_pair_once_in_its_experts_blocks():
    ids = torch.tensor([[2, 0], [2, -1], [5, 2], [0, 2]], device=DEVICE)
    pairs, block_expert = _moe().sort_by_expert(ids, experts=4, block_m=2)
    n = ids.numel()
    placed = pairs[pairs < n]
    assert sorted(placed.tolist()) == [0, 1, 2, 5, 6, 7]  # -1 and 5 (>= E) left out
    flat = ids.reshape(-1)
    for b, e in enumerate(block_expert.tolist()):
        rows = pairs[2 * b:2 * b + 2]
        rows = rows[rows < n]
        assert (e == -1) == (rows.numel() == 0) and all(flat[r] == e for r in rows.tolist())


def test_sort_by_expert_on_many_pairs_and_experts_int32_ids_and_none():
    """Several programs of the count and scatter kernels, E not a power of two, int32 ids as vLLM's, ids outside
    [0, E) anywhere; and no pairs at all."""
    moe = _moe()
    ids = torch.randint(-1, 70, (300, 6), dtype=torch.int32, generator=torch.Generator().manual_seed(0)).to(DEVICE)
    pairs, block_expert = moe.sort_by_expert(ids, experts=64, block_m=16)
    n, flat = ids.numel(), ids.reshape(-1).cpu()
    placed = pairs[pairs < n].cpu()
    assert sorted(placed.tolist()) == ((flat >= 0) & (flat < 64)).nonzero().flatten().tolist()
    for b, e in enumerate(block_expert.tolist()):
        rows = pairs[16 * b:16 * b + 16].cpu()
        rows = rows[rows < n]
        assert (e == -1) == (rows.numel() == 0) and all(flat[r] == e for r in rows.tolist())
    empty = moe.sort_by_expert(torch.empty(0, 2, dtype=torch.int32, device=DEVICE), experts=4, block_m=2)
    assert empty[0].numel() == empty[1].numel() == 0


def test_unknown_activation_is_refused():
    args = list(SLOTS["fused_moe"].make_inputs(_moe_case(), torch.float32, DEVICE, torch.Generator().manual_seed(0)))
    args[5] = "relu2"
    with pytest.raises(ValueError, match="activation must be one of"):
        _moe().fused_moe(*args)


# ----------------------------------------------------------------------------- GPU only: the catalog's cases

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
LOW_TOL = {torch.float16: {"atol": 5e-3, "rtol": 5e-3}, torch.bfloat16: {"atol": 3e-2, "rtol": 3e-2}}
CATALOG = [(s, i) for s in ("gemm", "fused_moe") for i in range(len(SLOTS[s].cases))]


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("slot,index", CATALOG, ids=[f"{s}-{i}" for s, i in CATALOG])
def test_catalog_cases_on_gpu(slot, index, dtype):
    fn = _gemm() if slot == "gemm" else _moe().fused_moe
    _check(slot, fn, SLOTS[slot].cases[index], index, dtype, TOL if dtype == torch.float32 else LOW_TOL[dtype])


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("slot", ["gemm", "fused_moe"])
def test_cuda_graph_capture_and_replay(slot):
    """Captured once, replayed on new data (new routing for fused_moe): the reference answer for that data."""
    fn = _gemm() if slot == "gemm" else _moe().fused_moe
    for case in SLOTS[slot].cases:
        _, (got,), (want,) = capture_and_replay(SLOTS[slot], fn, case)
        torch.testing.assert_close(got, want, **TOL)
