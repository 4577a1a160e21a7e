"""2-D convolution: torch.nn.functional.conv2d with zero padding, groups included (depthwise: groups == C)."""
from __future__ import annotations

import torch

from fk_adapters.tasks.slot import SGLANG_DIFFUSERS_FALLBACK, Slot, acc, nbytes

# A ViT patch embedding (stride = kernel), a 3x3 ResNet conv with padding in channels-last, a ConvNeXt 7x7 depthwise
# conv, a strided dilated grouped conv with a non-square kernel and bias, a 1x1 projection.
CONV_CASES = (
    {"n": 2, "c": 3, "hw": (32, 32), "o": 64, "k": (16, 16), "stride": (16, 16), "padding": (0, 0),
     "dilation": (1, 1), "groups": 1, "bias": True},
    {"n": 2, "c": 16, "hw": (14, 14), "o": 32, "k": (3, 3), "stride": (1, 1), "padding": (1, 1),
     "dilation": (1, 1), "groups": 1, "bias": False, "channels_last": True},
    {"n": 1, "c": 32, "hw": (12, 12), "o": 32, "k": (7, 7), "stride": (1, 1), "padding": (3, 3),
     "dilation": (1, 1), "groups": 32, "bias": True},
    {"n": 2, "c": 12, "hw": (15, 11), "o": 18, "k": (3, 2), "stride": (2, 1), "padding": (2, 1),
     "dilation": (2, 3), "groups": 3, "bias": True},
    {"n": 3, "c": 24, "hw": (7, 7), "o": 8, "k": (1, 1), "stride": (1, 1), "padding": (0, 0),
     "dilation": (1, 1), "groups": 1, "bias": False, "channels_last": True},
)


def out_size(x_shape, w_shape, stride, padding, dilation) -> tuple[int, int]:
    """(OH, OW) of a convolution of an [N, C, H, W] input with an [O, C/groups, KH, KW] weight."""
    return tuple((x_shape[2 + i] + 2 * padding[i] - dilation[i] * (w_shape[2 + i] - 1) - 1) // stride[i] + 1
                 for i in range(2))


def memory_format(x: torch.Tensor):
    """channels_last when ``x`` is laid out so (and not also plainly contiguous), else contiguous."""
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        return torch.channels_last
    return torch.contiguous_format


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride, padding, dilation,
           groups: int) -> torch.Tensor:
    """out[n, o, i, j] = bias[o] + sum over c in o's group (C/groups channels: group g = o // (O/groups) reads
    channels g*C/groups ...), kh, kw of weight[o, c, kh, kw] * xpad[n, g*C/groups + c, i*stride[0] + kh*dilation[0],
    j*stride[1] + kw*dilation[1]], xpad being x with padding[0] zero rows above and below and padding[1] zero
    columns left and right. Accumulated in float32 (float64 for float64), cast to x.dtype, in x's memory format
    (channels-last in, channels-last out)."""
    n, c, _, _ = x.shape
    o, cg, kh, kw = weight.shape
    oh, ow = out_size(x.shape, weight.shape, stride, padding, dilation)
    xp = torch.nn.functional.pad(acc(x), (padding[1], padding[1], padding[0], padding[0]))
    xg = xp.reshape(n, groups, cg, *xp.shape[2:])
    wg = acc(weight).reshape(groups, o // groups, cg, kh, kw)
    out = torch.zeros(n, groups, o // groups, oh, ow, dtype=xg.dtype, device=x.device)
    for r in range(kh):
        for s in range(kw):
            h0, w0 = r * dilation[0], s * dilation[1]
            tap = xg[..., h0:h0 + stride[0] * (oh - 1) + 1:stride[0], w0:w0 + stride[1] * (ow - 1) + 1:stride[1]]
            out += torch.einsum("ngchw,gkc->ngkhw", tap, wg[..., r, s])
    out = out.reshape(n, o, oh, ow)
    if bias is not None:
        out = out + acc(bias)[:, None, None]
    return out.to(x.dtype).contiguous(memory_format=memory_format(x))


def _conv_inputs(case, dtype, device, gen):
    (h, w), (kh, kw), c, g = case["hw"], case["k"], case["c"], case["groups"]
    x = torch.randn(case["n"], c, h, w, generator=gen)
    weight = torch.randn(case["o"], c // g, kh, kw, generator=gen) / (c // g * kh * kw) ** 0.5
    bias = 0.1 * torch.randn(case["o"], generator=gen) if case["bias"] else None
    x, weight, bias = (None if v is None else v.to(device=device, dtype=dtype) for v in (x, weight, bias))
    if case.get("channels_last"):
        x = x.contiguous(memory_format=torch.channels_last)
    return x, weight, bias, case["stride"], case["padding"], case["dilation"], g


def _fake(x, weight, bias, stride, padding, dilation, groups):
    oh, ow = out_size(x.shape, weight.shape, stride, padding, dilation)
    return x.new_empty((x.shape[0], weight.shape[0], oh, ow)).contiguous(memory_format=memory_format(x))


def _flops(x, weight, bias, stride, padding, dilation, groups) -> int:
    """2 multiply-add flops per output element per weight element of its group."""
    oh, ow = out_size(x.shape, weight.shape, stride, padding, dilation)
    return 2 * x.shape[0] * oh * ow * weight.numel()


def _traffic(x, weight, bias, stride, padding, dilation, groups) -> int:
    oh, ow = out_size(x.shape, weight.shape, stride, padding, dilation)
    return nbytes(x) + nbytes(weight) + nbytes(bias) + x.shape[0] * weight.shape[0] * oh * ow * x.element_size()


_NOT_IN_LLM_ENGINES = "its models have no 2-D convolution on the paths fk hooks (vision towers stay stock)"

CONV2D = Slot(
    name="conv2d",
    summary="2-D convolution with zero padding, stride, dilation and groups (NCHW or channels-last input)",
    signature=("conv2d(x: Tensor[N, C, H, W], weight: Tensor[O, C/groups, KH, KW], bias: Tensor[O] | None, "
               "stride: int[2], padding: int[2], dilation: int[2], groups: int) -> Tensor[N, O, OH, OW]"),
    schema="(Tensor x, Tensor weight, Tensor? bias, int[2] stride, int[2] padding, int[2] dilation, int groups) "
           "-> Tensor",
    fake=_fake,
    reference=conv2d,
    make_inputs=_conv_inputs,
    cases=CONV_CASES,
    traffic=_traffic,
    flops=_flops,
    entries={
        "transformers": ("forward(x) of each module whose type is exactly torch.nn.Conv2d or torch.nn.Conv1d with "
                         "padding_mode 'zeros', per instance, when its own forward agrees with the slot (patch "
                         "embeddings, ResNet / ConvNeXt convs, 1-D U-Nets); padding 'valid' and a symmetric 'same' "
                         "as ints; a Conv1d as a conv2d over one row: x [N, C, L] made contiguous and viewed "
                         "[N, C, 1, L], as torch's own conv1d does (a mixer's causal short Conv1d, padded past half "
                         "its kernel, stays stock)",),
    },
    not_entered={"vllm": _NOT_IN_LLM_ENGINES,
                 "sglang": f"{_NOT_IN_LLM_ENGINES}; {SGLANG_DIFFUSERS_FALLBACK}"},
)
