"""The example Triton plugin's layer_norm, conv2d and sdpa against the slots' references.

Without a GPU they run in Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py) in float32, on small
shapes that keep every edge of the slots' cases (the interpreter is slow); on a GPU the slots' own cases, in
bfloat16 as well.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from fk_adapters.tasks import SLOTS  # noqa: E402

if importlib.util.find_spec("fk_triton_kernels") is None:  # not installed: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "fk-triton"))

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

# The slots' edges, small: a patch embedding, padded channels-last 3x3, depthwise with padding, strided dilated
# grouped non-square with bias, 1x1 channels-last; an encoder, causal GQA, an additive and a boolean mask with a
# fully masked row, causal over more keys than queries, MQA decode with a head size under 16.
SMALL = {
    "layer_norm": SLOTS["layer_norm"].cases,
    "conv2d": ({"n": 2, "c": 3, "hw": (8, 8), "o": 8, "k": (4, 4), "stride": (4, 4), "padding": (0, 0),
                "dilation": (1, 1), "groups": 1, "bias": True},
               {"n": 1, "c": 4, "hw": (5, 5), "o": 6, "k": (3, 3), "stride": (1, 1), "padding": (1, 1),
                "dilation": (1, 1), "groups": 1, "bias": False, "channels_last": True},
               {"n": 1, "c": 4, "hw": (5, 5), "o": 4, "k": (3, 3), "stride": (1, 1), "padding": (1, 1),
                "dilation": (1, 1), "groups": 4, "bias": True},
               {"n": 2, "c": 6, "hw": (9, 7), "o": 6, "k": (3, 2), "stride": (2, 1), "padding": (2, 1),
                "dilation": (2, 3), "groups": 3, "bias": True},
               {"n": 2, "c": 8, "hw": (3, 3), "o": 4, "k": (1, 1), "stride": (1, 1), "padding": (0, 0),
                "dilation": (1, 1), "groups": 1, "bias": False, "channels_last": True}),
    "sdpa": ({"b": 2, "hq": 2, "hkv": 2, "l": 9, "s": 9, "d": 16},
             {"b": 1, "hq": 4, "hkv": 2, "l": 18, "s": 18, "d": 16, "causal": True},
             {"b": 2, "hq": 2, "hkv": 1, "l": 5, "s": 5, "d": 16, "mask": "additive"},
             {"b": 2, "hq": 2, "hkv": 2, "l": 6, "s": 10, "d": 16, "mask": "bool"},
             {"b": 1, "hq": 2, "hkv": 2, "l": 5, "s": 12, "d": 16, "causal": True, "mask": "bool"},
             {"b": 2, "hq": 4, "hkv": 1, "l": 1, "s": 20, "d": 8}),
}
CASES = [(slot, i) for slot, cases in SMALL.items() for i in range(len(cases))]


def _kernel(slot):
    from fk_triton_kernels import conv, layer_norm, sdpa

    return {"layer_norm": layer_norm.layer_norm, "conv2d": conv.conv2d, "sdpa": sdpa.sdpa}[slot]


def _run(slot, index, dtype, cases):
    s = SLOTS[slot]
    args = s.make_inputs(cases[index], dtype, DEVICE, torch.Generator().manual_seed(index))
    return _kernel(slot)(*args), s.reference(*args)


@pytest.mark.parametrize("slot, index", CASES)
def test_matches_the_reference_float32(slot, index):
    got, want = _run(slot, index, torch.float32, SMALL[slot])
    assert got.shape == want.shape and got.stride() == want.stride()  # channels-last stays channels-last
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_a_strided_row_view_and_a_one_dim_mask():
    from fk_triton_kernels import layer_norm, sdpa

    wide = torch.randn(6, 48, device=DEVICE)
    x = wide[:, 8:40]  # rows 48 apart, as a slice of a fused projection
    w, b = torch.randn(32, device=DEVICE), torch.randn(32, device=DEVICE)
    torch.testing.assert_close(layer_norm.layer_norm(x, w, b, 1e-5), SLOTS["layer_norm"].reference(x, w, b, 1e-5))
    q, k = torch.randn(1, 2, 3, 16, device=DEVICE), torch.randn(1, 2, 4, 16, device=DEVICE).transpose(2, 3)
    k = k.transpose(2, 3)  # a strided key view
    keep = torch.tensor([True, False, True, True], device=DEVICE)
    torch.testing.assert_close(sdpa.sdpa(q, k, k, keep, False, 0.25), SLOTS["sdpa"].reference(q, k, k, keep, False,
                                                                                                0.25))


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU")
@pytest.mark.parametrize("slot", list(SMALL))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_slots_own_cases_on_a_gpu(slot, dtype):
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    for index in range(len(SLOTS[slot].cases)):
        got, want = _run(slot, index, dtype, SLOTS[slot].cases)
        torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


def test_sdpa_takes_the_widest_tiles_the_device_takes(monkeypatch):
    """A launch the GPU refuses for its shared memory (fk46-pi0's head size 256 in bf16 at 64 x 64 and 3 stages)
    tries the next tiles, and the tiles that fit are the only ones tried again."""
    from fk_triton_kernels import sdpa
    from triton.runtime.errors import OutOfResources

    tried = []

    class Refusing:  # a device that takes 32-wide tiles at most
        def __getitem__(self, grid):
            def launch(*args, BLOCK_M, BLOCK_N, num_stages, **meta):
                tried.append((grid, BLOCK_M, num_stages))
                if BLOCK_M > 32:
                    raise OutOfResources(237568, 232448, "shared memory")
            return launch

    monkeypatch.setattr(sdpa, "fk_triton_sdpa_kernel", Refusing())
    monkeypatch.setattr(sdpa, "_TILES", ((64, 3), (64, 2), (32, 2), (16, 1)))
    monkeypatch.setattr(sdpa, "_FITS", {})
    q = torch.randn(1, 2, 70, 16)
    sdpa.sdpa(q, q, q, None, True, 0.25)
    assert [t[1:] for t in tried] == [(64, 3), (64, 2), (32, 2)] and tried[-1][0] == (3, 2)
    sdpa.sdpa(q, q, q, None, True, 0.25)
    assert tried[-1][1:] == (32, 2) and len(tried) == 4
    sdpa.sdpa(q.double(), q.double(), q.double(), None, True, 0.25)  # another dtype: its own search
    assert len(tried) == 7
    monkeypatch.setattr(sdpa, "_TILES", ((64, 3),))
    monkeypatch.setattr(sdpa, "_FITS", {})
    with pytest.raises(RuntimeError, match="no tile"):
        sdpa.sdpa(q, q, q, None, True, 0.25)
