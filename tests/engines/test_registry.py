import pytest

from fk_adapters import engines


def test_known_engines_and_unknown():
    assert engines.get("vllm").devices == ("cpu", "cuda")
    assert engines.get("sglang").devices == ("cuda",)
    with pytest.raises(engines.EngineError, match="unknown engine"):
        engines.get("trt")


def test_per_engine_python_path_and_cache(monkeypatch):
    spec = engines.get("sglang")
    monkeypatch.delenv("FK_SGLANG_PYTHONPATH", raising=False)
    assert "PYTHONPATH" not in spec.env("cuda")
    monkeypatch.setenv("FK_SGLANG_PYTHONPATH", "/tmp/fk-site/sglang")
    env = spec.env("cuda", cache_dir="/c")
    assert env["PYTHONPATH"] == "/tmp/fk-site/sglang" and env[spec.cache_var] == "/c"
    assert spec.process_env()["PYTHONPATH"] == "/tmp/fk-site/sglang"
    assert engines.get("vllm").env("cpu")["TRITON_INTERPRET"] == "1"


def test_what_compiled_mode_means_per_engine():
    vllm, sglang = engines.get("vllm"), engines.get("sglang")
    assert vllm.modes("compiled", "cuda") == (True, True) and vllm.modes("compiled", "cpu") == (True, False)
    assert sglang.modes("compiled", "cuda") == (False, True)  # CUDA graphs, no torch.compile
    assert vllm.modes("eager", "cuda") == sglang.modes("eager", "cuda") == (False, False)
    assert "no torch.compile" in sglang.describe_mode("compiled", "cuda")
    assert vllm.describe_mode("eager", "cpu").startswith("eager")
