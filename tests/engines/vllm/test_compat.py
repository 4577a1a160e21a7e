"""The per-layer config bridge for vLLM models that predate transformers' heterogeneous configs."""
import json

import pytest

transformers = pytest.importorskip("transformers")

# Imported after the skip: these modules need transformers.
from fk_adapters import scenarios  # noqa: E402
from fk_adapters.engines.vllm import compat, driver  # noqa: E402


def _gemma4_config():
    return transformers.AutoConfig.for_model(**dict(scenarios.load("fk46-gemma-4").model))


def test_restore_legacy_globals_puts_full_attention_values_back():
    cfg = _gemma4_config()
    text = getattr(cfg, "text_config", cfg)
    if vars(text).get("_heterogeneity_spec") is None:
        pytest.skip("this transformers has no heterogeneous configs")
    with pytest.raises(Exception, match="per-layer attribute"):
        _ = text.head_dim
    compat.restore_legacy_globals(cfg)
    assert (text.head_dim, text.global_head_dim, text.num_global_key_value_heads) == (256, 512, 2)


def test_overrides_only_where_the_vllm_model_does_not_read_per_layer_config(monkeypatch, tmp_path):
    monkeypatch.setattr(compat, "model_reads_per_layer_config", lambda module: False)
    assert compat.hf_overrides_for("gemma4") is compat.restore_legacy_globals
    assert compat.hf_overrides_for("llama") is None
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma4"}))
    assert driver.engine_args({"model_dir": str(tmp_path)})["hf_overrides"] is compat.restore_legacy_globals
    monkeypatch.setattr(compat, "model_reads_per_layer_config", lambda module: True)
    assert "hf_overrides" not in driver.engine_args({"model_dir": str(tmp_path)})
