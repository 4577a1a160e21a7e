"""What a re-run into the same --out takes up again: which cut scenarios resume, and on what machines."""
import json

from fk_adapters import engines
from fk_adapters.runner import reuse
from fk_adapters.runner.config import RunConfig


def _cfg(tmp_path, **kw):
    return RunConfig(**{**dict(engine=engines.get("vllm"), plugins=["p"], device="cuda", mode="compiled",
                               out_dir=str(tmp_path), interleave=5), **kw})


def _cut_row(ran=2):
    runs = [[{"wall_s": 60.0 + i} for i in range(ran)], [{"wall_s": 70.0 + i} for i in range(ran)]]
    return {"scenario": "s", "status": "PASSED", "rounds": {"planned": 5, "ran": ran, "runs": runs}}


def _earlier(tmp_path, cfg, gpus, engine_version="0.26.0", rows=None):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"run_key": reuse.run_key(cfg), "gpus": gpus, "engine_version": engine_version,
                                "scenarios": rows if rows is not None else [_cut_row()]}))
    return str(path)


def test_a_cut_scenario_resumes_on_the_same_gpus_and_engine_build_with_its_rounds_seconds(tmp_path, monkeypatch):
    monkeypatch.setattr(reuse.gpu_share, "gpu_names", lambda *a: ["NVIDIA H100 80GB HBM3"])
    cfg = _cfg(tmp_path)
    said = []
    done, resume = reuse.finished_rows(cfg, _earlier(tmp_path, cfg, ["NVIDIA H100 80GB HBM3"]), said.append, "0.26.0")
    assert done == {}
    assert resume == {"s": [{"baseline": 60.0, "candidate": 70.0}, {"baseline": 61.0, "candidate": 71.0}]}
    assert said == ["resuming 1 scenario(s) that --time-budget stopped before their last round: s after round 2; "
                    "--force runs every round again"]


def test_another_gpu_model_or_baseline_from_runs_every_round_again(tmp_path, monkeypatch):
    monkeypatch.setattr(reuse.gpu_share, "gpu_names", lambda *a: ["NVIDIA H200"])
    cfg = _cfg(tmp_path)
    said = []
    done, resume = reuse.finished_rows(cfg, _earlier(tmp_path, cfg, ["NVIDIA H100 80GB HBM3"]), said.append, "0.26.0")
    assert done == {} and resume == {}
    assert "all 5 rounds (gpus: ['NVIDIA H100 80GB HBM3'] there, ['NVIDIA H200'] here)" in said[0]
    cfg = _cfg(tmp_path, baseline_from="/elsewhere")
    said = []
    done, resume = reuse.finished_rows(cfg, _earlier(tmp_path, cfg, ["NVIDIA H200"]), said.append, "0.26.0")
    assert resume == {} and "--baseline-from: round 1's baseline is that run's" in said[0]


def test_a_finished_scenario_is_kept_and_force_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(reuse.gpu_share, "gpu_names", lambda *a: ["G"])
    cfg = _cfg(tmp_path)
    row = {"scenario": "s", "status": "PASSED", "rounds": {"planned": 5, "runs": [[], []]}}
    path = _earlier(tmp_path, cfg, ["G"], rows=[row])
    assert reuse.finished_rows(cfg, path, lambda m: None, "0.26.0") == ({"s": row}, {})
    assert reuse.finished_rows(_cfg(tmp_path, force=True), path, lambda m: None, "0.26.0") == ({}, {})
