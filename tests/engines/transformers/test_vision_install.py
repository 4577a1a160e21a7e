"""layer_norm, conv2d and sdpa routed into transformers models built in this process (tiny, random init)."""
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from fk_adapters import probe  # noqa: E402
from fk_adapters.engines.transformers import attention, install, natives  # noqa: E402
from fk_adapters.kernel import Kernel  # noqa: E402
from fk_adapters.tasks import SLOTS  # noqa: E402
from tests.engines.transformers.test_install import clean_probe  # noqa: E402,F401 (autouse: counters cleared)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "plugins" / "fk-wrong"))
from fk_wrong import conv as wrong_conv, layer_norm as wrong_ln, sdpa as wrong_sdpa  # noqa: E402

VISION = ("layer_norm", "conv2d", "sdpa")
DINO = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, patch_size=16,
            image_size=64, num_register_tokens=4, use_gated_mlp=True, hidden_act="silu", layerscale_value=1e-5)


def build(arch: str, config):
    torch.manual_seed(0)
    model = getattr(transformers, arch)._from_config(config, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # spread the norms' weights and biases, as fk's seeded checkpoints do
        for p in model.parameters():
            if p.ndim == 1 and p.numel() > 1 and bool((p == p.reshape(-1)[0]).all()):
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def dinov3():
    return build("DINOv3ViTModel", transformers.DINOv3ViTConfig(**DINO))


def convnextv2():
    return build("ConvNextV2Model", transformers.ConvNextV2Config(num_channels=3, hidden_sizes=[16, 32], num_stages=2,
                                                                  depths=[1, 1], image_size=32))


def bert():
    return build("BertModel", transformers.BertConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2,
                                                      num_attention_heads=4, intermediate_size=128))


def llama():
    return build("LlamaModel", transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                                        vocab_size=256))


def pixels(size: int = 64):
    return {"pixel_values": torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))}


def tokens(padded: bool):
    ids = torch.randint(3, 256, (2, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    if padded:
        mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def forward(model, x):
    with torch.inference_mode():
        return model(**x).last_hidden_state.clone()


def chosen(plugin_fns: dict) -> dict:
    """install()'s ``chosen``: the given functions as plugin kernels ({slot: fn}; None: the native, a passthrough)."""
    def kernel(slot, fn):
        if fn is None:
            return Kernel(slot=slot, factory=lambda native: native, devices=("cpu",))
        return Kernel(slot=slot, fn=fn, devices=("cpu",))
    return {s: ("tfx_" + ("pass" if fn is None else fn.__name__), kernel(s, fn)) for s, fn in plugin_fns.items()}


def calls(slot: str) -> int:
    return sum(n for k, n in probe.calls.items() if k.endswith(":" + slot))


def test_dinov3_takes_every_vision_slot_and_passthrough_is_bit_for_bit():
    model, stock = dinov3(), dinov3()
    base = forward(stock, pixels())
    entered = install.install(model, chosen(dict.fromkeys(VISION)))
    assert entered == {"layer_norm": ["LayerNorm"], "conv2d": ["Conv2d"], "sdpa": ["DINOv3ViTAttention"]}
    assert probe.constructed == {"layer_norm": 5, "conv2d": 1, "sdpa": 2} and not probe.not_routed  # 2 x 2 + final
    assert model.config._attn_implementation == attention.KEY and stock.config._attn_implementation == "sdpa"
    assert "forward" in vars(model.embeddings.patch_embeddings) and "forward" in vars(model.model.layer[0].norm1)
    assert "forward" not in vars(stock.model.layer[0].norm1)  # the instance, not the class
    assert torch.equal(forward(model, pixels()), base)
    assert (calls("layer_norm"), calls("conv2d"), calls("sdpa")) == (5, 1, 2)


@pytest.mark.parametrize("wrong", [wrong_ln.uncentred_layer_norm, wrong_conv.short_channel_conv2d,
                                   wrong_sdpa.last_key_dropped_sdpa])
def test_references_as_kernels_agree_with_stock_and_each_wrong_kernel_breaks_it(wrong):
    base = forward(dinov3(), pixels())
    model = dinov3()
    install.install(model, chosen({s: SLOTS[s].reference for s in VISION}))
    torch.testing.assert_close(forward(model, pixels()), base, atol=1e-4, rtol=1e-4)
    slot = {"uncentred_layer_norm": "layer_norm", "short_channel_conv2d": "conv2d"}.get(wrong.__name__, "sdpa")
    bad = dinov3()
    install.install(bad, chosen({s: wrong if s == slot else SLOTS[s].reference for s in VISION}))
    assert (forward(bad, pixels()) - base).abs().max() > 1e-2
    assert calls(slot) == 2 * {"layer_norm": 5, "conv2d": 1, "sdpa": 2}[slot]


def test_convnextv2_routes_its_convs_and_final_norm_its_channels_first_norms_stay_stock():
    model, stock = convnextv2(), convnextv2()
    base = forward(stock, pixels(32))
    entered = install.install(model, chosen({"conv2d": SLOTS["conv2d"].reference,
                                             "layer_norm": SLOTS["layer_norm"].reference}))
    assert entered == {"conv2d": ["Conv2d"], "layer_norm": ["LayerNorm"]}
    # stem + 2 depthwise 7x7 + 1 downsampling conv; the pooled output's LayerNorm
    assert probe.constructed == {"conv2d": 4, "layer_norm": 1}
    # the stem's, each block's and the downsampling's channels-first / channels-last norms: a subclass
    assert probe.not_routed["layer_norm (ConvNextV2LayerNorm: a subclass of nn.LayerNorm (its own forward))"] == 4
    torch.testing.assert_close(forward(model, pixels(32)), base, atol=1e-4, rtol=1e-4)
    assert calls("conv2d") == 4 and calls("layer_norm") == 1


@pytest.mark.parametrize("build_model, x", [(bert, tokens(True)), (llama, tokens(True)), (llama, tokens(False))],
                         ids=["bert-padded", "llama-gqa-padded", "llama-gqa-causal"])
def test_sdpa_takes_masks_gqa_and_causal_calls(build_model, x):
    """BERT: a padding mask; Llama: GQA (4 over 2 heads) under a causal mask, or is_causal with no mask."""
    stock = build_model()
    base = forward(stock, x)
    for fn in (None, SLOTS["sdpa"].reference):
        probe.calls.clear()
        model = build_model()
        entered = install.install(model, chosen({"sdpa": fn}))
        assert len(entered["sdpa"]) == 1 and probe.constructed["sdpa"] in (2, 4)
        got = forward(model, x)
        if fn is None:
            assert torch.equal(got, base)
        else:
            torch.testing.assert_close(got, base, atol=1e-5, rtol=1e-5)
        assert calls("sdpa") == 2 and not probe.not_routed
        probe.constructed.clear()


def test_calls_the_slot_cannot_express_run_sdpa_attention_forward_counted():
    model = llama()
    install.install(model, chosen({"sdpa": SLOTS["sdpa"].reference}))
    m = model.layers[0].self_attn
    fn = transformers.AttentionInterface()[attention.KEY]
    q, k = torch.randn(1, 4, 3, 16), torch.randn(1, 2, 3, 16)
    for kwargs, why in (({"dropout": 0.1}, "dropout 0.1"), ({"output_attentions": True}, "output_attentions"),
                        ({"position_bias": torch.zeros(1, 4, 3, 3)}, "a position bias")):
        out, _ = fn(m, q, k, k, None, **kwargs)
        assert out.shape == (1, 3, 4, 16)
        assert probe.not_routed[f"sdpa (call: LlamaAttention: {why})"] == 1
    fn(llama().layers[0].self_attn, q, k, k, None)  # a module of another model, never routed
    assert probe.not_routed["sdpa (call: LlamaAttention: a module fk did not route (built after install))"] == 1
    assert calls("sdpa") == 0


class _FallsBackByName(torch.nn.Module):
    """Attention that, as SAM's, looks "sdpa" up by name in one branch (there when flash attention is asked for)."""

    is_causal, head_dim = False, 16

    def __init__(self, by_name: bool = False):
        super().__init__()
        self.config = transformers.PretrainedConfig()
        self.config._attn_implementation = "sdpa"
        self.o_proj, self.by_name = torch.nn.Linear(16, 16), by_name

    def forward(self, q, k, v):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        fn = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, None)
        if self.by_name:
            fn = ALL_ATTENTION_FUNCTIONS["sdpa"]
        return self.o_proj(fn(self, q, k, v, None, dropout=0.0, scaling=0.25)[0])


class _ComparesTheName(_FallsBackByName):
    def forward(self, q, k, v):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        fn = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, None)
        scaling = 0.25 if self.config._attn_implementation == "sdpa" else 0.5
        return self.o_proj(fn(self, q, k, v, None, dropout=0.0, scaling=scaling)[0])


def test_a_lookup_by_the_name_sdpa_is_routed_and_counted_a_comparison_keeps_the_model_stock():
    q, k = torch.randn(1, 2, 3, 16), torch.randn(1, 2, 3, 16)
    torch.manual_seed(0)
    stock = _FallsBackByName()
    with torch.inference_mode():
        want = stock(q, k, k)
    torch.manual_seed(0)
    m = _FallsBackByName()
    assert install.install(m, chosen({"sdpa": SLOTS["sdpa"].reference})) == {"sdpa": ["_FallsBackByName"]}
    with torch.inference_mode():
        torch.testing.assert_close(m(q, k, k), want, atol=1e-5, rtol=1e-5)
        assert calls("sdpa") == 1 and not probe.not_routed
        m.by_name = True
        assert torch.equal(m(q, k, k), want)  # transformers' own sdpa, counted as a call left stock
    assert calls("sdpa") == 1 and probe.not_routed == {"sdpa (call: _FallsBackByName: sdpa looked up by its name)": 1}
    probe.not_routed.clear()
    named = _ComparesTheName()
    assert install.install(named, chosen({"sdpa": SLOTS["sdpa"].reference})) == {"sdpa": []}
    assert named.config._attn_implementation == "sdpa" and probe.not_routed == {
        "sdpa (_ComparesTheName: _ComparesTheName tests the implementation's name 'sdpa')": 1}


def test_eager_models_and_convs_the_slot_cannot_take_stay_stock_with_why():
    from torch import nn

    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                                   vocab_size=256)
    cfg._attn_implementation = "eager"
    install.install(transformers.LlamaModel._from_config(cfg).eval(), chosen({"sdpa": SLOTS["sdpa"].reference}))
    assert probe.not_routed == {"sdpa (LlamaAttention: attention implementation 'eager')": 1}
    probe.not_routed.clear()
    convs = nn.Sequential(nn.Conv2d(3, 4, 3, padding_mode="reflect", padding=1), nn.Conv2d(4, 4, 2, padding="same"),
                          nn.Conv2d(4, 4, 3, padding="same"), nn.Conv2d(4, 4, 3, padding="valid"))
    assert install.install(convs, chosen({"conv2d": None})) == {"conv2d": ["Conv2d"]}
    assert probe.constructed == {"conv2d": 2} and set(probe.not_routed) == {
        "conv2d (Conv2d: padding_mode 'reflect' (the slot pads with zeros))",
        "conv2d (Conv2d: padding 'same' with an even kernel extent (pads one side more))"}
    x = torch.randn(1, 3, 9, 9)
    with torch.inference_mode():
        y = convs(x)
    assert y.shape == (1, 4, 7, 7) and calls("conv2d") == 2


class _OwnConv1d(torch.nn.Conv1d):
    pass


def test_conv1d_enters_conv2d_as_one_row_bit_for_bit_and_a_wrong_kernel_breaks_it():
    from torch import nn

    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv1d(4, 8, 5, padding=2), nn.Conv1d(8, 8, 3, stride=2, dilation=2, groups=4),
                             nn.Conv1d(8, 6, 3, padding="same"), nn.Conv1d(6, 6, 3, padding=1, padding_mode="circular"),
                             nn.Conv1d(6, 6, 4, padding=3, groups=6), _OwnConv1d(6, 6, 1)).eval()

    x = torch.randn(2, 11, 4).transpose(1, 2)  # permuted, as a model's [N, L, C] -> [N, C, L] feeds it
    stock = forward_plain(net(), x)
    model = net()
    assert install.install(model, chosen({"conv2d": None})) == {"conv2d": ["Conv1d (as a conv2d over one row)"]}
    assert probe.constructed == {"conv2d": 3} and set(probe.not_routed) == {
        "conv2d (Conv1d: padding_mode 'circular' (the slot pads with zeros))",
        "conv2d (Conv1d: padding 3 on each side of a 4-wide kernel: a causal short convolution, trimmed by its mixer "
        "(which often takes only its weight))",
        "conv2d (_OwnConv1d: a subclass of nn.Conv1d (its own forward))"}
    assert torch.equal(forward_plain(model, x), stock) and calls("conv2d") == 3
    with torch.inference_mode():
        assert torch.equal(model[0](x[0]), net()[0](x[0]))  # unbatched: the module's own forward, counted
    assert probe.not_routed["conv2d (call: Conv1d: unbatched 2-D input)"] == 1 and calls("conv2d") == 3
    wrong = net()
    install.install(wrong, chosen({"conv2d": wrong_conv.short_channel_conv2d}))
    assert not torch.allclose(forward_plain(wrong, x), stock, atol=1e-3)


def forward_plain(model, x):
    with torch.inference_mode():
        return model(x).clone()


def test_natives_are_transformers_own_ops_bit_for_bit():
    from torch import nn
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    ln, conv = nn.LayerNorm(24), nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    x = torch.randn(5, 24)
    assert torch.equal(natives.layer_norm(x, ln.weight, ln.bias, ln.eps), ln(x))
    img = torch.randn(2, 4, 9, 9).contiguous(memory_format=torch.channels_last)
    assert torch.equal(natives.conv2d(img, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, 2),
                       conv(img))
    m = llama().layers[0].self_attn
    q, k, v = torch.randn(2, 4, 6, 16), torch.randn(2, 2, 6, 16), torch.randn(2, 2, 6, 16)
    mask = torch.rand(2, 1, 6, 6) > 0.2
    for attn, causal in ((None, True), (mask, False)):
        want = sdpa_attention_forward(m, q, k, v, attn, is_causal=causal, scaling=0.25)[0]
        assert torch.equal(natives.sdpa(q, k, v, attn, causal, 0.25).transpose(1, 2), want)


def test_fk_passthrough_offers_the_new_slots_with_the_engines_own_ops():
    fk_passthrough = pytest.importorskip("fk_passthrough")
    kernels = {k.slot: k for k in fk_passthrough.fk_kernels(engine="transformers", device="cpu")}
    for slot in VISION:
        assert "cpu" in kernels[slot].devices and kernels[slot].factory(natives.NATIVES[slot]) is natives.NATIVES[slot]
