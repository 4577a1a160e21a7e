"""The runner with a fake engine: run_job, the checkpoint writer and the plugin evidence stood in for."""
import os

import pytest

from fk_adapters.runner import ab


@pytest.fixture
def fake_runner(monkeypatch, tmp_path):
    """fake_runner(engine, judge): ``engine`` replaces run_job, ``judge`` evidence.judge; candidates' run dirs
    show a plugin load, baselines' none."""
    def install(engine, judge):
        monkeypatch.setattr(ab, "run_job", lambda *a, **k: engine(*a, **k))
        monkeypatch.setattr(ab, "scenario_checkpoint", lambda sc, root: (str(tmp_path / "m"), "key"))
        monkeypatch.setattr(ab.probe, "read_loads",
                            lambda d: [{"pid": 1}] if "candidate" in os.path.basename(d) else [])
        monkeypatch.setattr(ab.evidence, "plugin_code", lambda loads: {})
        monkeypatch.setattr(ab.evidence, "judge", judge)
        return engine
    return install
