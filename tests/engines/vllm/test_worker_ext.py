"""The worker extension's walk of the built model: RoPE layers that a fused kernel of their owner bypasses."""
from types import SimpleNamespace

import pytest

from fk_adapters import probe
from fk_adapters.engines.vllm import worker_ext


@pytest.fixture
def counters(monkeypatch):
    monkeypatch.setattr(probe, "constructed", probe.Counter())
    monkeypatch.setattr(probe, "not_routed", probe.Counter())
    monkeypatch.setattr(probe, "stock_layers", probe.Counter())


def _rope():
    probe.layer_built(("rotary_embedding",))
    return SimpleNamespace(_fk_routed=True)


def test_a_rope_only_fused_owners_hold_moves_to_left_stock(counters):
    rope = _rope()
    worker_ext.count_fused_rope([SimpleNamespace(rotary_emb=rope, use_fused_qk_norm_rope_gate=True)])
    assert probe.constructed["rotary_embedding"] == 0 and not rope._fk_routed
    assert probe.stock_layers["rotary_embedding"] == 1
    (label,) = probe.not_routed
    assert "fused_qk_rmsnorm_rope_gate" in label


def test_a_rope_that_any_owner_calls_stays_routed(counters):
    shared, own = _rope(), _rope()
    worker_ext.count_fused_rope([SimpleNamespace(rotary_emb=shared, use_fused_qk_norm_rope_gate=True),
                                 SimpleNamespace(rotary_emb=shared, use_fused_qk_norm_rope_gate=False),
                                 SimpleNamespace(rotary_emb=own)])
    assert probe.constructed["rotary_embedding"] == 2 and shared._fk_routed and not probe.not_routed
