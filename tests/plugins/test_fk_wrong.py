"""fk-wrong's wrong-gemm, wrong-moe and the non-LLM slots' wrong variants: wrong against the slots' references, yet
finite and of the right scale, so that only a real numerical diff catches them."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from fk_adapters.tasks import SLOTS

if importlib.util.find_spec("fk_wrong") is None:  # not installed: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "fk-wrong"))

from fk_wrong import (  # noqa: E402
                      conv as wrong_conv,
                      gemm as wrong_gemm,
                      layer_norm as wrong_layer_norm,
                      moe as wrong_moe,
                      sdpa as wrong_sdpa,
)


def _both(slot, fn, index):
    s = SLOTS[slot]
    args = s.make_inputs(s.cases[index], torch.float32, "cpu", torch.Generator().manual_seed(index))
    return fn(*args), s.reference(*args)


def _plausible(got, want, at_most):
    """Same shape, dtype, finite, and off by less than ``at_most`` of the reference's norm: no sanity check trips."""
    assert got.shape == want.shape and got.dtype == want.dtype and torch.isfinite(got).all()
    assert (got - want).norm() < at_most * want.norm()


@pytest.mark.parametrize("index", range(len(SLOTS["gemm"].cases)))
def test_wrong_gemm_is_off_on_the_first_column_block_only(index):
    got, want = _both("gemm", wrong_gemm.off_block_gemm, index)
    _plausible(got, want, 0.15)
    n = wrong_gemm.WRONG_COLUMNS
    assert torch.equal(got[:, n:], want[:, n:])
    shift = got[:, :n] - want[:, :n]
    torch.testing.assert_close(shift, torch.full_like(shift, wrong_gemm.SHIFT * want.std().item()), rtol=0.05,
                               atol=1e-6)
    with pytest.raises(AssertionError):  # far outside a float32 kernel's tolerance
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("index", range(len(SLOTS["fused_moe"].cases)))
def test_wrong_moe_drops_the_last_choice(index):
    case = SLOTS["fused_moe"].cases[index]
    got, want = _both("fused_moe", wrong_moe.last_choice_dropped_moe, index)
    if case["topk"] == 1:  # nothing to drop
        torch.testing.assert_close(got, want)
        return
    _plausible(got, want, 0.9)
    routed = slice(None, -case["padded"]) if case.get("padded") else slice(None)
    assert ((got - want)[routed].abs().amax(dim=-1) > 1e-3).all()  # every routed token is off


def test_wrong_moe_is_what_the_reference_gives_without_the_last_choice():
    s = SLOTS["fused_moe"]
    args = list(s.make_inputs(s.cases[0], torch.float32, "cpu", torch.Generator().manual_seed(0)))
    got = wrong_moe.last_choice_dropped_moe(*args)
    args[3], args[4] = args[3][:, :-1], args[4][:, :-1]
    torch.testing.assert_close(got, s.reference(*args))


def test_wrong_moe_is_graph_safe_no_host_sync():
    """Declared cuda_graph_safe: no data-dependent shapes (nonzero, unique) on its way."""
    s = SLOTS["fused_moe"]
    args = s.make_inputs(s.cases[1], torch.float32, "cpu", torch.Generator().manual_seed(1))
    torch.testing.assert_close(torch.compile(wrong_moe.last_choice_dropped_moe, fullgraph=True)(*args),
                               wrong_moe.last_choice_dropped_moe(*args))
    (kern,) = wrong_moe.fk_kernels(engine="sglang", device="cuda")
    assert kern.cuda_graph_safe


@pytest.mark.parametrize("module, slot", [(wrong_gemm, "gemm"), (wrong_moe, "fused_moe")])
def test_declared_for_their_slot_on_cpu_and_cuda(module, slot):
    (kern,) = module.fk_kernels(engine="vllm", device="cpu")
    kern.validate(SLOTS)
    assert kern.slot == slot and kern.devices == ("cuda", "cpu")


def test_entry_points_when_installed():
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("fk-wrong")
    except PackageNotFoundError:
        pytest.skip("fk-wrong is not installed (tested from the source tree)")
    eps = {ep.name: ep.value for ep in dist.entry_points if ep.group == "fk_adapters"}
    assert eps["wrong-gemm"] == "fk_wrong.gemm" and eps["wrong-moe"] == "fk_wrong.moe"


def test_wrong_attention_is_off_everywhere_by_a_little():
    from fk_wrong import attention as wrong_attention

    from fk_adapters.tasks.attention import PAGED_ATTENTION

    for index, case in enumerate(PAGED_ATTENTION.cases):
        args = PAGED_ATTENTION.make_inputs(case, torch.float32, "cpu", torch.Generator().manual_seed(index))
        (want,) = PAGED_ATTENTION.run_reference(args)
        got = args[-1].clone()
        wrong_attention.hot_attention(*args[:-1], got)
        owned = int(args[5][-1])
        assert torch.equal(got[owned:], want[owned:])  # rows no request owns: untouched by both
        _plausible(got[:owned], want[:owned], 0.5)
        assert (got[:owned] - want[:owned]).abs().amax() > 1e-3


@pytest.mark.parametrize("index", range(len(SLOTS["layer_norm"].cases)))
def test_wrong_layer_norm_is_off_by_the_rows_mean_only(index):
    got, want = _both("layer_norm", wrong_layer_norm.uncentred_layer_norm, index)
    assert got.shape == want.shape and torch.isfinite(got).all()
    assert not torch.allclose(got, want, atol=1e-3, rtol=1e-3)
    s = SLOTS["layer_norm"]
    x, w, b, eps = s.make_inputs(s.cases[index], torch.float32, "cpu", torch.Generator().manual_seed(index))
    centred = x - x.mean(dim=-1, keepdim=True)  # rows of zero mean: exact
    torch.testing.assert_close(wrong_layer_norm.uncentred_layer_norm(centred, w, b, eps),
                               s.reference(centred, w, b, eps), atol=1e-4, rtol=1e-4)  # the mean's rounding


@pytest.mark.parametrize("index", range(len(SLOTS["conv2d"].cases)))
def test_wrong_conv2d_leaves_out_each_groups_last_channel(index):
    got, want = _both("conv2d", wrong_conv.short_channel_conv2d, index)
    assert got.shape == want.shape and torch.isfinite(got).all()
    assert not torch.allclose(got, want, atol=1e-3, rtol=1e-3)
    s = SLOTS["conv2d"]
    x, w, *rest = s.make_inputs(s.cases[index], torch.float32, "cpu", torch.Generator().manual_seed(index))
    w[:, -1] = 0  # a weight that never reads that channel: exact
    torch.testing.assert_close(wrong_conv.short_channel_conv2d(x, w, *rest), s.reference(x, w, *rest))


@pytest.mark.parametrize("index", range(len(SLOTS["sdpa"].cases)))
def test_wrong_sdpa_never_attends_the_last_key(index):
    got, want = _both("sdpa", wrong_sdpa.last_key_dropped_sdpa, index)
    _plausible(got, want, 1.0)
    case = SLOTS["sdpa"].cases[index]
    unseen = case.get("causal") and case["s"] > case["l"]  # top-left causal: no query reaches the last key anyway
    assert torch.allclose(got, want, atol=1e-6) if unseen else not torch.allclose(got, want, atol=1e-3, rtol=1e-3)
    s = SLOTS["sdpa"]
    q, k, v, mask, causal, scale = s.make_inputs(s.cases[index], torch.float32, "cpu",
                                                 torch.Generator().manual_seed(index))
    hidden = torch.ones(k.shape[2], dtype=torch.bool)
    hidden[-1] = False  # the last key masked out by the caller: exact
    mask = hidden if mask is None else (mask & hidden if mask.dtype == torch.bool else mask.masked_fill(~hidden, -1e30))
    if not causal:
        torch.testing.assert_close(wrong_sdpa.last_key_dropped_sdpa(q, k, v, mask, causal, scale),
                                   s.reference(q, k, v, mask, causal, scale))
