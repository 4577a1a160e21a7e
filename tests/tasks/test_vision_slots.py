"""The non-LLM slots' references (layer_norm, conv2d, sdpa) against torch's own ops in float64, and their edges."""
import pytest
import torch
import torch.nn.functional as F

from fk_adapters.tasks import SLOTS


def _double(args):
    return tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)


@pytest.mark.parametrize("case", range(len(SLOTS["layer_norm"].cases)))
def test_layer_norm_is_torch_layer_norm(case):
    s = SLOTS["layer_norm"]
    x, w, b, eps = _double(s.make_inputs(s.cases[case], torch.float32, "cpu", torch.Generator().manual_seed(case)))
    want = F.layer_norm(x, x.shape[-1:], w, b, eps)
    torch.testing.assert_close(s.reference(x, w, b, eps), want, atol=1e-12, rtol=1e-12)


def test_layer_norm_takes_the_mean_out_and_computes_in_float32():
    ref = SLOTS["layer_norm"].reference
    x = torch.tensor([[101.0, 103.0]])  # mean 102, biased var 1
    torch.testing.assert_close(ref(x, None, None, 0.0), torch.tensor([[-1.0, 1.0]]))
    w, b = torch.tensor([2.0, 3.0]), torch.tensor([0.5, -0.5])
    torch.testing.assert_close(ref(x, w, b, 0.0), torch.tensor([[-1.5, 2.5]]))
    torch.testing.assert_close(ref(x, None, None, 3.0), torch.tensor([[-0.5, 0.5]]))  # var + eps = 4
    xb = torch.full((1, 512), 300.0, dtype=torch.bfloat16)
    xb[0, 0] = 302.0  # bfloat16 statistics would lose the 2 against 300 (spacing 2): float32 keeps it
    out = ref(xb, None, None, 1e-5)
    assert out.dtype == torch.bfloat16 and float(out[0, 0]) > 20 and float(out[0, 1]) < 0


@pytest.mark.parametrize("case", range(len(SLOTS["conv2d"].cases)))
def test_conv2d_is_torch_conv2d(case):
    s = SLOTS["conv2d"]
    args = s.make_inputs(s.cases[case], torch.float32, "cpu", torch.Generator().manual_seed(case))
    x, w, b, stride, padding, dilation, groups = _double(args)
    got = s.reference(x, w, b, stride, padding, dilation, groups)
    torch.testing.assert_close(got, F.conv2d(x, w, b, stride, padding, dilation, groups), atol=1e-12, rtol=1e-12)
    assert got.is_contiguous(memory_format=torch.channels_last) == bool(s.cases[case].get("channels_last"))
    assert s.flops(*args) == 2 * got.shape[0] * got.shape[2] * got.shape[3] * w.numel()
    assert s.traffic(*args) >= x.numel() * 4 + got.numel() * 4


def test_conv2d_groups_and_padding_by_hand():
    ref = SLOTS["conv2d"].reference
    x = torch.arange(1.0, 5.0).reshape(1, 1, 2, 2)  # [[1, 2], [3, 4]]
    w = torch.ones(1, 1, 2, 2)
    torch.testing.assert_close(ref(x, w, None, (1, 1), (0, 0), (1, 1), 1), torch.tensor([[[[10.0]]]]))
    # zero padding of one on every side: 3x3 sums of the 2x2 windows over the padded input
    padded = ref(x, w, torch.tensor([0.5]), (1, 1), (1, 1), (1, 1), 1)
    torch.testing.assert_close(padded[0, 0], torch.tensor([[1.0, 3.0, 2.0], [4.0, 10.0, 6.0], [3.0, 7.0, 4.0]]) + 0.5)
    # depthwise: each channel only with its own filter
    x2 = torch.stack([x[0, 0], 10 * x[0, 0]])[None]
    w2 = torch.stack([torch.ones(1, 2, 2), -torch.ones(1, 2, 2)])
    torch.testing.assert_close(ref(x2, w2, None, (1, 1), (0, 0), (1, 1), 2).flatten(), torch.tensor([10.0, -100.0]))


@pytest.mark.parametrize("case", range(len(SLOTS["sdpa"].cases)))
def test_sdpa_is_torch_sdpa(case):
    s = SLOTS["sdpa"]
    args = s.make_inputs(s.cases[case], torch.float32, "cpu", torch.Generator().manual_seed(case))
    q, k, v, mask, causal, scale = _double(args)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                          enable_gqa=q.shape[1] != k.shape[1])
    torch.testing.assert_close(s.reference(q, k, v, mask, causal, scale), want, atol=1e-12, rtol=1e-12)


def test_sdpa_edges_fully_masked_rows_causal_alignment_and_gqa_heads():
    ref = SLOTS["sdpa"].reference
    case = SLOTS["sdpa"].cases[3]  # a boolean mask with batch row 0's query 1 masked out
    q, k, v, mask, causal, scale = SLOTS["sdpa"].make_inputs(case, torch.float32, "cpu", torch.Generator())
    out = ref(q, k, v, mask, causal, scale)
    assert torch.equal(out[0, :, 1], torch.zeros_like(out[0, :, 1])) and out[1, :, 1].abs().sum() > 0
    # causal with more keys than queries: query 0 sees key 0 only (top-left), whatever the later keys hold
    q, k, v = torch.randn(1, 1, 2, 4), torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4)
    torch.testing.assert_close(ref(q, k, v, None, True, 0.5)[0, 0, 0], v[0, 0, 0])
    # GQA: query heads 0, 1 read kv head 0; 2, 3 kv head 1
    q, k, v = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    out = ref(q, k, v, None, False, 0.3)
    for h in range(4):
        torch.testing.assert_close(out[:, h:h + 1], ref(q[:, h:h + 1], k[:, h // 2:h // 2 + 1], v[:, h // 2:h // 2 + 1],
                                                        None, False, 0.3))
    # an additive mask of -inf on a key is that key hidden by a boolean mask
    keep = torch.tensor([True, False, True])
    torch.testing.assert_close(ref(q, k, v, torch.where(keep, 0.0, float("-inf")), False, 0.3),
                               ref(q, k, v, keep, False, 0.3))


def test_sdpa_flops_count_the_causal_triangle():
    s = SLOTS["sdpa"]
    q, k = torch.empty(2, 3, 4, 8), torch.empty(2, 1, 4, 8)
    assert s.flops(q, k, k, None, False, 1.0) == 4 * 2 * 3 * 8 * 16
    assert s.flops(q, k, k, None, True, 1.0) == 4 * 2 * 3 * 8 * 10  # 1 + 2 + 3 + 4 pairs
    assert s.traffic(q, k, k, None, False, 1.0) == (2 * q.numel() + 2 * k.numel()) * 4
