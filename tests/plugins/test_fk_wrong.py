"""fk-wrong's wrong-gemm and wrong-moe: wrong against the slots' references, yet finite and of the right scale, so
that only a real numerical diff catches them."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from fk_adapters.tasks import SLOTS

if importlib.util.find_spec("fk_wrong") is None:  # not installed: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "fk-wrong"))

from fk_wrong import gemm as wrong_gemm, moe as wrong_moe  # noqa: E402


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
