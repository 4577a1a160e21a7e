"""The example Triton plugin's paged attention against the slot's reference, on every case of the slot.

Without a GPU it runs in Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py) in float32; on a GPU
in bfloat16 as well, and captured in a CUDA graph.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from _cuda_graph import capture_and_replay  # noqa: E402

from fk_adapters.tasks.attention import PAGED_ATTENTION as SLOT  # noqa: E402

if importlib.util.find_spec("fk_triton_kernels") is None:  # not installed: use the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "fk-triton"))

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)


def _run(index, dtype):
    from fk_triton_kernels.attention import paged_attention

    args = SLOT.make_inputs(SLOT.cases[index], dtype, DEVICE, torch.Generator().manual_seed(index))
    (want,) = SLOT.run_reference(args)
    got = args[-1].clone()
    paged_attention(*args[:-1], got)
    return got, want


@pytest.mark.parametrize("index", range(len(SLOT.cases)))
def test_matches_the_reference_float32(index):
    got, want = _run(index, torch.float32)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)  # untouched rows included (exactly 7.0)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU")
@pytest.mark.parametrize("index", range(len(SLOT.cases)))
def test_matches_the_reference_bfloat16(index):
    got, want = _run(index, torch.bfloat16)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU")
def test_cuda_graph_capture_and_replay():
    """Captured once, replayed with new queries, caches and block tables: the reference answer for those."""
    from fk_triton_kernels.attention import paged_attention

    for case in SLOT.cases:
        _, got, want = capture_and_replay(SLOT, paged_attention, case)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=2e-5, rtol=2e-5)


def test_the_newest_key_matters():
    from fk_triton_kernels.attention import paged_attention

    index = next(i for i, c in enumerate(SLOT.cases) if c.get("window"))
    args = list(SLOT.make_inputs(SLOT.cases[index], torch.float32, DEVICE, torch.Generator().manual_seed(index)))
    base = args[-1].clone()
    paged_attention(*args[:-1], base)
    args[4] = args[4] - 1  # one key fewer per request: a kernel reading past seq_lens would not see the change
    short = args[-1].clone()
    paged_attention(*args[:-1], short)
    assert (short - base).abs().amax() > 1e-3
