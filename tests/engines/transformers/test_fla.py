"""flash-linear-attention's models in the transformers host: the fk46 entries' configs (shrunk) build a seeded
checkpoint and load back through the host's own path as fla's classes. Their forward needs a GPU (fla's Triton
kernels are autotuned; on a CPU triton has no driver): its evidence is a GPU run."""
import importlib.util

import pytest

from fk_adapters import model_classes, scenarios, weights
from fk_adapters.engines.transformers import driver

pytestmark = pytest.mark.skipif(importlib.util.find_spec("fla") is None, reason="flash-linear-attention not installed")

SMALL = {"fk46-gla": dict(hidden_size=64, intermediate_size=128, num_heads=2),
         "fk46-rwkv-7": dict(hidden_size=128, intermediate_size=256, num_heads=2, head_dim=64, decay_low_rank_dim=8,
                             a_low_rank_dim=8, v_low_rank_dim=8, gate_low_rank_dim=16),
         "fk46-retnet": dict(hidden_size=64, intermediate_size=128, num_heads=2)}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_fk46_config_builds_and_loads_as_flas_own_class(tmp_path, name):
    sc = scenarios.load(name)
    assert sc.hosts == ["transformers"]
    cfg = dict(sc.model, num_hidden_layers=2, vocab_size=256, **SMALL[name])
    weights.write_with_transformers(cfg, str(tmp_path), seed=1, dtype="float32", device="cpu")
    model = driver.load_model({"model_dir": str(tmp_path), "architectures": cfg["architectures"],
                               "dtype": "float32"}, "cpu")
    arch = cfg["architectures"][0]
    assert type(model).__name__ == arch and type(model).__module__.startswith("fla.models")
    assert model_classes.model_class(arch) is type(model)
    assert any(type(m).__name__ == "Linear" for m in model.modules())  # the gemm slot's modules are there
