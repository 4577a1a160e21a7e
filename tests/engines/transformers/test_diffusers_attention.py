"""sdpa routed into diffusers' attention modules built in this process through its attention registry (tiny FLUX
attention, random init)."""
import pytest
import torch

pytest.importorskip("diffusers")

from diffusers.models.attention_dispatch import (  # noqa: E402
    _AttentionBackendRegistry as registry,
    attention_backend,
    dispatch_attention_fn,
)
from diffusers.models.transformers.transformer_flux import FluxAttention  # noqa: E402

from fk_adapters import probe  # noqa: E402
from fk_adapters.engines.transformers import diffusers_attention, install, natives  # noqa: E402
from fk_adapters.tasks import SLOTS  # noqa: E402
from tests.engines.transformers.test_install import clean_probe  # noqa: E402,F401 (autouse: counters cleared)
from tests.engines.transformers.test_vision_install import calls, chosen, wrong_sdpa  # noqa: E402


def flux_attention():
    torch.manual_seed(0)
    return FluxAttention(query_dim=64, heads=2, dim_head=32).eval()


def run(m, x):
    with torch.inference_mode():
        return m(x)


def test_a_routed_module_reaches_the_slot_and_passthrough_is_bit_for_bit():
    m, stock, x = flux_attention(), flux_attention(), torch.randn(2, 7, 64)
    base = run(stock, x)
    assert install.install(m, chosen({"sdpa": None}))["sdpa"] == ["FluxAttention"]
    assert probe.constructed == {"sdpa": 1} and not probe.not_routed
    assert torch.equal(run(m, x), base) and calls("sdpa") == 1
    assert torch.equal(run(stock, x), base) and calls("sdpa") == 1  # a module fk did not route: diffusers' native


def test_the_reference_agrees_and_a_wrong_kernel_breaks_the_output():
    x = torch.randn(2, 7, 64)
    base = run(flux_attention(), x)
    for fn, same in ((SLOTS["sdpa"].reference, True), (wrong_sdpa.last_key_dropped_sdpa, False)):
        m = flux_attention()
        install.install(m, chosen({"sdpa": fn}))
        assert torch.allclose(run(m, x), base, atol=1e-5) is same, fn.__name__


def test_a_key_mask_maps_as_diffusers_native_maps_it():
    q, k, v = (torch.randn(2, 5, 2, 32) for _ in range(3))
    mask = torch.arange(5)[None, :] < torch.tensor([5, 3])[:, None]
    want = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in (q, k, v)), attn_mask=mask[:, None, None, :]).transpose(1, 2)
    assert torch.allclose(diffusers_attention.mapped(natives.NATIVES["sdpa"], q, k, v, mask), want, atol=1e-6)


def test_calls_the_slot_cannot_express_run_diffusers_native_counted():
    m = flux_attention()
    install.install(m, chosen({"sdpa": SLOTS["sdpa"].reference}))
    q = torch.randn(1, 3, 2, 32)
    diffusers_attention._calling.append(m)
    try:
        out = dispatch_attention_fn(q, q, q, dropout_p=0.1)
    finally:
        diffusers_attention._calling.pop()
    assert out.shape == (1, 3, 2, 32) and calls("sdpa") == 0
    assert probe.not_routed["sdpa (call: FluxAttention: dropout 0.1)"] == 1


def test_another_backend_or_a_differing_mapping_leaves_the_module_stock(monkeypatch):
    with attention_backend("_native_math"):
        assert install.install(flux_attention(), chosen({"sdpa": None}))["sdpa"] == []
    assert probe.not_routed["sdpa (FluxAttention: attention backend '_native_math')"] == 1
    monkeypatch.setitem(natives.NATIVES, "sdpa", wrong_sdpa.last_key_dropped_sdpa)
    assert diffusers_attention.route(flux_attention(), SLOTS["sdpa"].reference) == []
    assert registry._backends[registry._active_backend] is diffusers_attention._fk_native
