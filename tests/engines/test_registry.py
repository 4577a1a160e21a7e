import os
import subprocess
import sys

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


def test_vllms_model_class_inspections_are_shared_by_every_runs_cache(tmp_path, monkeypatch):
    """Only the inspection cache is shared: each run's compile cache stays its own folder."""
    monkeypatch.setenv("FK_CACHE_HOME", str(tmp_path / "home"))
    spec = engines.get("vllm")
    for variant in ("baseline", "wrong-1234"):
        env = spec.env("cpu", cache_dir=str(tmp_path / variant))
        assert env["VLLM_CACHE_ROOT"] == str(tmp_path / variant)
    shared = tmp_path / "home" / "vllm-modelinfos"
    links = {(tmp_path / variant / "modelinfos").resolve() for variant in ("baseline", "wrong-1234")}
    assert links == {shared}
    assert sorted(p.name for p in (tmp_path / "baseline").iterdir()) == ["modelinfos"]
    spec.env("cpu", cache_dir=str(tmp_path / "baseline"))  # a second run of the same variant: the link stands


def test_an_engine_site_brings_the_folders_its_pth_files_name(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "dsl" / "python_packages" / "cutlass_like").mkdir(parents=True)
    (site / "dsl" / "python_packages" / "cutlass_like" / "__init__.py").write_text("OK = 1\n")
    (site / "dsl.pth").write_text("dsl/python_packages\n")
    (site / "other.pth").write_text("# a comment\nimport os; os.environ['FK_PTH_RAN'] = '1'\nmissing/dir\n")
    monkeypatch.setenv("FK_SGLANG_PYTHONPATH", f"{site}{os.pathsep}{tmp_path / 'plain'}")
    spec = engines.get("sglang")
    named = str(site / "dsl" / "python_packages")
    assert spec.pythonpath.split(os.pathsep) == [str(site), str(tmp_path / "plain"), named]
    env = spec.process_env()
    assert env["PYTHONPATH"] == spec.env("cuda")["PYTHONPATH"] == spec.pythonpath
    out = subprocess.run([sys.executable, "-c",
                          "import cutlass_like, os; print(cutlass_like.OK, os.environ.get('FK_PTH_RAN'))"],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "None"]  # a .pth import line is never run for an engine site
    monkeypatch.setenv("FK_SGLANG_PYTHONPATH", str(tmp_path / "plain"))
    assert spec.pythonpath == str(tmp_path / "plain")


def test_what_compiled_mode_means_per_engine():
    vllm, sglang = engines.get("vllm"), engines.get("sglang")
    assert vllm.modes("compiled", "cuda") == (True, True) and vllm.modes("compiled", "cpu") == (True, False)
    assert sglang.modes("compiled", "cuda") == (False, True)  # CUDA graphs, no torch.compile
    assert vllm.modes("eager", "cuda") == sglang.modes("eager", "cuda") == (False, False)
    assert "no torch.compile" in sglang.describe_mode("compiled", "cuda")
    assert vllm.describe_mode("eager", "cpu").startswith("eager")
