"""Shared fixtures: fake plugin distributions on sys.path, and engine/GPU availability."""
from __future__ import annotations

import hashlib
import importlib
import os
import sys
import textwrap

import pytest

try:  # before anything imports triton: on a machine without CUDA, Triton kernels run interpreted
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass


@pytest.fixture(scope="session")
def _cache_home(tmp_path_factory):
    return str(tmp_path_factory.mktemp("fk-cache-home"))


@pytest.fixture(autouse=True)
def _user_cache(_cache_home, monkeypatch):
    """fk's caches that outlive a run (engine integrity, vLLM's model-class inspections) stay out of the user's home,
    shared by the session's tests as by a user's runs."""
    monkeypatch.setenv("FK_CACHE_HOME", _cache_home)
    monkeypatch.delenv("FK_INTEGRITY_CACHE", raising=False)


@pytest.fixture(autouse=True)
def _engine_own_mark():
    """The engine-own mark is one install's, in one process (``loading.ENGINE_OWN``); a test starts and ends without
    another test's (CI runs a worker's files in one process: session 54 found SGLang's hooks reading a stale mark)."""
    from fk_adapters.engines import loading

    loading.ENGINE_OWN.clear()
    yield
    loading.ENGINE_OWN.clear()


@pytest.fixture
def triton_compiles(tmp_path, monkeypatch):
    """The test as one fk engine run whose Triton compiles are logged (``jit_watch.engine_env``, run folder
    ``tmp_path``); gives ``compile(name)``: what Triton's compile of kernel ``name`` stores through that cache."""
    from fk_adapters import jit_watch

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    for k, v in jit_watch.engine_env(str(tmp_path)).items():
        monkeypatch.setenv(k, v)

    def compile_kernel(name: str) -> None:
        from triton.runtime.cache import get_cache_manager

        key = hashlib.sha256(name.encode()).hexdigest()
        get_cache_manager(key).put("{}", f"{name}.json", binary=False)
        get_cache_manager(key).put_group(f"__grp__{name}.json", {})

    return compile_kernel


@pytest.fixture
def make_plugin(tmp_path, monkeypatch):
    """Create an installed-looking distribution with an ``fk_adapters`` entry point.

    make_plugin("name", "module source") -> entry-point name. The module is importable and the
    entry point points at it, exactly as `pip install` of a plugin package would leave it.
    """
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def make(name: str, source: str, version: str = "1.0") -> str:
        mod = f"fkplug_{name}"
        (site / f"{mod}.py").write_text(textwrap.dedent(source))
        info = site / f"fkplug_{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fkplug-{name}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[fk_adapters]\n{name} = {mod}\n")
        importlib.invalidate_caches()
        return name

    yield make
    for m in [m for m in sys.modules if m.startswith("fkplug_")]:
        del sys.modules[m]


GOOD_PLUGIN = """
    from fk_adapters import Kernel, hookimpl

    def my_rms_norm(x, weight, eps):
        return x

    @hookimpl
    def fk_kernels(engine, device):
        return [Kernel(slot="rms_norm", fn=my_rms_norm, devices=("cuda", "cpu"))]
"""


@pytest.fixture
def fake_runner(monkeypatch, tmp_path):
    """The runner with a fake engine: fake_runner(engine, judge) puts ``engine`` in place of run_job and ``judge`` of
    evidence.judge; candidates' run dirs show a plugin load, baselines' none; no checkpoint is written."""
    from fk_adapters.runner import ab, engine_process

    def install(engine, judge):
        monkeypatch.setattr(engine_process, "run_job", lambda *a, **k: engine(*a, **k))
        monkeypatch.setattr(ab, "scenario_checkpoint", lambda sc, root, echo: (str(tmp_path / "m"), "key"))
        monkeypatch.setattr(ab.probe, "read_loads",
                            lambda d: [{"pid": 1}] if "candidate" in os.path.basename(d) else [])
        monkeypatch.setattr(ab.evidence, "plugin_code", lambda loads: {})
        monkeypatch.setattr(ab.evidence, "judge", judge)
        return engine
    return install
