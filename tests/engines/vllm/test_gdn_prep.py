"""The GDN adapter's input preparation on stand-ins (no engine): what each slot gets from the engine's prep kernel."""
from types import SimpleNamespace

import torch

from fk_adapters.engines.vllm.linear_attention import gdn_prep

LAYER = SimpleNamespace(A_log=torch.zeros(4), dt_bias=torch.zeros(4), num_k_heads=2, tp_size=1, head_k_dim=8,
                        head_v_dim=8)


def _prep(x, a, b, A_log, dt_bias, heads, dk, dv, apply_l2norm):
    """A stand-in for vLLM's ``fused_post_conv_prep``: float32 gating, as the real one's."""
    n = x.shape[0]
    return (x[:, :heads * dk], x[:, heads * dk:2 * heads * dk], x[:, 2 * heads * dk:], torch.zeros(n, 4),
            torch.full((n, 4), 1 / 3) + float(apply_l2norm))


def _inputs(n: int):
    return torch.randn(n, 64, dtype=torch.bfloat16), torch.randn(n, 4, dtype=torch.bfloat16), \
        torch.randn(n, 4, dtype=torch.bfloat16)


def test_decodes_and_prefills_are_split_and_only_prefills_get_normalised():
    x, a, b = _inputs(5)
    dec, pre = gdn_prep(_prep, LAYER, x, a, b, 2, packed_decode=False)
    assert [t.shape[0] for t in dec] == [2] * 5 and [t.shape[0] for t in pre] == [3] * 5
    assert torch.equal(dec[0], x[:2, :16]) and torch.equal(pre[2], x[2:, 32:])
    assert dec[4].dtype == torch.float32 and dec[4][0, 0] == 1 / 3 and pre[4][0, 0] == 1 + 1 / 3


def test_a_step_of_decodes_alone_rounds_beta_as_stocks_packed_kernel():
    x, a, b = _inputs(3)
    dec, pre = gdn_prep(_prep, LAYER, x, a, b, 3, packed_decode=True)
    assert dec[4].dtype == torch.bfloat16 and dec[4][0, 0] == torch.tensor(1 / 3).to(torch.bfloat16)
    assert dec[3].dtype == torch.float32 and pre[0].shape[0] == 0
