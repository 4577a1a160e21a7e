"""Which of vLLM's own kernels the natives pick (``engines.vllm.natives``); their numbers are checked on a GPU
(``test_natives_gpu.py``)."""
import importlib.util

import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")


@pytest.mark.parametrize("gdn,kda", [("chunk.chunk_gated_delta_rule", "kda.chunk_kda"),
                                     ("fused_recurrent.fused_recurrent_gated_delta_rule", "kda.fused_recurrent_kda")])
def test_a_decay_per_key_takes_vllms_kda_kernel_with_a_query_and_key_head_per_value_head(gdn, kda):
    from fk_adapters.engines.vllm.natives import _fla_kernel

    q, k, v = torch.randn(3, 2, 8), torch.randn(3, 2, 8), torch.randn(3, 4, 8)
    fn, q1, k1 = _fla_kernel(gdn, kda, q, k, v, torch.randn(3, 4))  # a decay per head: GDN's kernel, heads as given
    assert fn.__name__ == gdn.rsplit(".", 1)[1] and q1 is q and k1 is k
    fn, q2, k2 = _fla_kernel(gdn, kda, q, k, v, torch.randn(3, 4, 8))
    assert fn.__module__.endswith(".ops.kda") and fn.__name__ == kda.rsplit(".", 1)[1]
    assert torch.equal(q2[:, 2:], q[:, 1:].expand(-1, 2, -1))  # value heads 2 and 3 read key head 1
    assert torch.equal(k2[:, :2], k[:, :1].expand(-1, 2, -1))
