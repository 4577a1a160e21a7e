"""vLLM 0.26's own CUDA kernels in the slot interface (what the passthrough plugin and fk-vllm-moe route to) against
the slots' references, bf16 on every catalog case. Marked ``gpu``; the evidence is under ``reports/gpu/``."""
import importlib.util

import pytest
import torch

from fk_adapters.tasks import SLOTS

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

BF16_TOL = {"atol": 1.6e-2, "rtol": 1.6e-2}
CASES = [(name, i) for name in ("gemm", "fused_moe", "paged_attention", "gated_rms_norm")
         for i, c in enumerate(SLOTS[name].cases)
         if name != "paged_attention" or (c["bs"] % 16 == 0 and c.get("layout") != "k_transposed")]  # FA's caches


@pytest.mark.parametrize("name,index", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_vllm_natives_match_the_slot_reference(name, index):
    import vllm._custom_ops  # noqa: F401

    from fk_adapters.engines.vllm.natives import NATIVES

    slot = SLOTS[name]
    args = slot.make_inputs(slot.cases[index], torch.bfloat16, "cuda", torch.Generator().manual_seed(index))
    mine = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    got = NATIVES[name](*mine)
    if slot.in_place:  # paged_attention: into out
        (got,) = (mine[i] for i in slot.mutated_positions())
    (want,) = slot.run_reference(args)
    torch.testing.assert_close(got.float(), want.float(), **BF16_TOL)


RECURRENT = [(name, i) for name in ("gated_delta_rule", "gated_delta_rule_decode", "ssd_chunk_scan", "ssm_state_update")
             for i in range(len(SLOTS[name].cases))]


@pytest.mark.parametrize("name,index", RECURRENT, ids=[f"{n}-{i}" for n, i in RECURRENT])
def test_vllm_recurrent_natives_match_the_slot_reference(name, index):
    """FLA's gated delta rule kernels (KDA's for a decay per key) and Mamba2's SSD scan / state update: out and the
    pool, skipped rows untouched."""
    import vllm._custom_ops  # noqa: F401

    from fk_adapters.engines.vllm.natives import NATIVES

    slot = SLOTS[name]
    args = slot.make_inputs(slot.cases[index], torch.bfloat16, "cuda", torch.Generator().manual_seed(index))
    mine = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
    NATIVES[name](*mine)
    for got, want in zip((mine[i] for i in slot.mutated_positions()), slot.run_reference(args)):
        torch.testing.assert_close(got.float(), want.float(), **BF16_TOL)
