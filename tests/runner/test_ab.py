"""Suite-level verdicts of the A/B runner, without an engine."""
import json
import os
import time
from types import SimpleNamespace

import pytest

from fk_adapters import engines, scenarios
from fk_adapters.runner import ab, engine_process, reference, reuse
from fk_adapters.runner.ab import RunConfig, evidence_mode, finish


def _row(status, **slots):
    return {"scenario": f"s{len(slots)}{status}", "status": status, "failures": [],
            "evidence": {"slots": {s: {"plugin": "p", "status": st} for s, st in slots.items()}}}


def _cfg(**kw):
    args = dict(engine=engines.get("vllm"), plugins=["p"], device="cuda", mode="compiled", out_dir="/x")
    return RunConfig(**{**args, **kw})


def test_slot_with_no_layer_anywhere_fails_the_suite_unless_allowed_as_uncovered():
    rows = [_row("PASSED", rms_norm="exercised", gelu_and_mul="n/a")]
    res = {"scenarios": rows}
    finish(res, _cfg())
    assert res["verdict"] == "FAIL" and "no scenario of this suite has a layer for: gelu_and_mul" in res["problems"][0]
    finish(res, _cfg(allow_unexercised=True))  # not the same permission
    assert res["verdict"] == "FAIL"
    finish(res, _cfg(allow_uncovered=True))
    assert res["verdict"] == "PASS"


def test_slot_with_layers_that_never_ran_needs_allow_unexercised():
    rows = [_row("NOT_EXERCISED", rms_norm="exercised", silu_and_mul="not exercised")]
    res = {"scenarios": rows}
    finish(res, _cfg(allow_uncovered=True))
    assert res["verdict"] == "FAIL" and any("never exercised in this suite: silu_and_mul" in p for p in res["problems"])


def test_a_scenario_where_no_slot_applies_does_not_fail_the_suite():
    rows = [_row("PASSED", rms_norm="exercised"), _row("NOT_APPLICABLE", rms_norm="n/a")]
    res = {"scenarios": rows}
    finish(res, _cfg())
    assert res["verdict"] == "PASS" and res["problems"] == []
    rows.append(_row("NOT_EXERCISED", rms_norm="not exercised"))
    finish(res, _cfg(allow_unexercised=True))
    assert res["verdict"] == "FAIL" and res["problems"] == [f"{rows[2]['scenario']}: NOT_EXERCISED"]


def test_evidence_mode_follows_the_engine():
    assert evidence_mode(_cfg()) == "compiled"
    assert evidence_mode(_cfg(engine=engines.get("sglang"))) == "graphs"
    assert evidence_mode(_cfg(mode="eager")) == "eager"


def test_a_failed_token_verdict_asks_for_the_float32_reference_that_can_judge_it():
    failed = {"teacher_forced": {}, "passed": False}
    assert reference.wants_reference(failed, "bfloat16", "vllm")
    assert reference.wants_reference(failed, "float32", "vllm")
    assert not reference.wants_reference(failed, "float32", "transformers")  # nothing independent left
    assert not reference.wants_reference(failed, "float32", "vllm", "audio")  # transformers' LLM path takes no audio
    assert reference.wants_reference(failed, "float16", "vllm", "audio")  # the engine's own float32 run
    assert not reference.wants_reference(dict(failed, passed=True), "bfloat16", "vllm")


def test_compile_cache_folder_follows_the_plugin_code_not_its_settings():
    from fk_adapters.runner.engine_process import variant as _variant

    def cfg(code):
        return SimpleNamespace(code=code)

    base = {"fk_adapters": "f1", "slow": {"source_sha256": "s1", "info": {"delay_us": 0}}}
    assert _variant(cfg(base), []) == "baseline"
    same = _variant(cfg(base), ["slow"])
    assert same.startswith("slow-")
    assert _variant(cfg(dict(base, slow={"source_sha256": "s1", "info": {"delay_us": 60}})), ["slow"]) == same
    assert _variant(cfg(dict(base, slow={"source_sha256": "s2", "info": {}})), ["slow"]) != same
    assert _variant(cfg(dict(base, fk_adapters="f2")), ["slow"]) != same


def test_gpu_share_records_become_one_line_per_disturbed_run():
    from fk_adapters.runner.ab import gpu_share_findings

    clean = {"gpu_share": {"watched": True, "samples": 9, "foreign": []}}
    other = {"gpu_share": {"watched": True, "samples": 9, "foreign": [
        {"pid": 1234, "name": "python3", "max_used_mib": 18482, "samples": 4},
        {"pid": 99, "name": "x", "max_used_mib": None, "samples": 1, "pid_gone": True}]}}
    blind = {"gpu_share": {"watched": False, "why": "nvidia-smi not found"}}
    disturbed, unwatched = gpu_share_findings({"baseline": [other], "candidate": [clean]})
    assert disturbed == ["baseline: another process used the GPU during this run (pid 1234 python3, up to 18482 MiB; "
                         "pid 99 x (gone before it could be read)): its timings are not comparable"]
    assert unwatched == []
    disturbed, unwatched = gpu_share_findings({"baseline": [clean, blind], "candidate": [blind, other]})
    assert [d.split(":")[0] for d in disturbed] == ["round 2 candidate"]
    assert unwatched == ["round 2 baseline, round 1 candidate: the GPU could not be watched for other processes "
                         "(nvidia-smi not found): these timings are unchecked"]
    assert gpu_share_findings({"baseline": [{}], "candidate": [{}]}) == ([], [])  # not watched on purpose (CPU)


def test_the_run_notes_name_timed_repeats_run_again_after_a_triton_compile():
    from fk_adapters.runner.ab import _run_notes

    redone = {"perf": {"retimed": [{"workload": "throughput balanced", "elapsed_s": 4.95,
                                    "compiled": "fused_moe_kernel x1"}]}}
    _, notes = _run_notes(_cfg(device="cuda"), {}, {"baseline": [redone, {}], "candidate": [{}, {}]})
    assert notes == ["round 1 baseline: 1 timed run(s) re-run, Triton compiled or autotuned kernels during them: "
                     "throughput balanced 4.95 s (fused_moe_kernel x1)"]


# ------------------------------------------------------------------- a failed engine run keeps what it measured

LOADS = [{"pid": 10, "role": "LLM (driver)", "plugins": [{"name": "p", "kernels": [{"slot": "rms_norm"}]}],
          "installed": {"rms_norm": {"plugin": "p", "kernel": "k", "entered": ["RMSNorm"]}}},
         {"pid": 11, "role": "EngineCore_DP0", "inherited_from": 10, "plugins": [{"name": "p", "kernels": []}],
          "installed": {"rms_norm": {"plugin": "p", "kernel": "k", "entered": ["RMSNorm"]}}},
         {"pid": 12, "role": "VllmWorker-0", "plugins": [{"name": "p", "kernels": []}],
          "installed": {"rms_norm": {"plugin": "p", "kernel": "k", "entered": ["RMSNorm"]}}}]
MEASURED = {"tokens": [[5, 6, 7], [8, 9, 1]], "token_top_ids": [[[5], [6], [7]], [[8], [9], [1]]],
            "teacher_logprobs": [[-0.5, -1.0], [-0.25, -2.0]]}
WORKER_PROBE = [{"pid": 12, "calls": {"p:rms_norm": 40}, "constructed": {"rms_norm": 5}}]


def _crashing_candidate(status="crashed", kept=True):
    """run_job's results: a stock baseline that finished, a candidate that died in its throughput phase with the
    keys proc.py filled in from its partial.json (or none)."""
    def run_job(python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
        if os.path.basename(run_dir) == "baseline":
            return dict(MEASURED, status="ok", wall_s=1.0, probe=[{"pid": 2}], perf={"throughput": {}})
        res = {"status": status, "error": "engine process exited with code -9 without a result", "wall_s": 2.0,
               "log_tail": "Killed"}
        if kept:
            res.update(MEASURED, probe_after_start=[{"pid": 12}], probe_after_correctness=WORKER_PROBE,
                       perf_unfinished={"throughput": {"w": [{"tokens_per_s": 9.0}]}, "latency": {}},
                       kept_from_partial=["perf_unfinished", "probe_after_correctness", "tokens"])
        return res
    return run_job


@pytest.fixture
def crash(monkeypatch, tmp_path):
    monkeypatch.setattr(ab, "scenario_checkpoint", lambda sc, root, echo: (str(tmp_path / "m"), "key"))
    monkeypatch.setattr(ab.probe, "read_loads", lambda d: LOADS if "candidate" in os.path.basename(d) else [])
    monkeypatch.setattr(engine_process, "run_job", _crashing_candidate())
    return lambda **kw: monkeypatch.setattr(engine_process, "run_job", _crashing_candidate(**kw))


def _local(tmp_path, **kw):
    return _cfg(device="cpu", mode="eager", out_dir=str(tmp_path / "out"), **kw)


def test_a_candidate_killed_in_its_throughput_phase_keeps_its_correctness_and_load_records(crash, tmp_path):
    row = ab.run_scenario(_local(tmp_path), scenarios.load("tiny-llama"), echo=lambda m: None)
    assert row["status"] == "RUNTIME_ERROR"  # never a pass from partial data
    assert row["failures"] == ["candidate: engine process exited with code -9 without a result"]
    c = row["correctness"]
    assert c["measured_before_failure"] is True and c["passed"] is True and c["tokens"]["identical"] == 2
    assert c["teacher_forced"]["max_abs"] == 0.0
    assert "perf" not in row  # the timed phase did not finish
    ev = row["evidence"]
    assert [p["pid"] for p in ev["processes"]] == [10, 11, 12]
    assert all(p["installed"] == ["rms_norm"] for p in ev["processes"])
    assert ev["workers"] == [{"pid": 12, "plugins_loaded": True}] and ev["as_of"] == "the end of correctness"
    assert ev["slots"]["rms_norm"]["status"] == "exercised" and ev["slots"]["rms_norm"]["calls"] == 40
    assert row["candidate"]["kept_from_partial"] == ["perf_unfinished", "probe_after_correctness", "tokens"]
    res = {"scenarios": [row]}
    finish(res, _local(tmp_path))
    assert res["verdict"] == "FAIL" and res["coverage"] == {}  # evidence from before a failure proves no coverage


def test_a_candidate_that_kept_nothing_shows_its_load_records_and_no_correctness(crash, tmp_path):
    crash(status="timeout", kept=False)
    row = ab.run_scenario(_local(tmp_path), scenarios.load("tiny-llama"), echo=lambda m: None)
    assert row["status"] == "TIMEOUT" and "correctness" not in row
    slot = row["evidence"]["slots"]["rms_norm"]
    assert slot == dict(slot, status="not judged", proof="no worker probe was kept: the run failed before its workers "
                        "reported")  # not "the model built no layer for this slot"
    assert row["evidence"]["processes"][2] == {"pid": 12, "role": "VllmWorker-0", "inherited_from": None,
                                               "installed": ["rms_norm"]}


def _ok_engine(calls, status="ok"):
    def run_job(python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
        calls.append(os.path.basename(run_dir))
        res = dict(MEASURED, status=status, wall_s=1.0, probe=WORKER_PROBE)
        return res if status == "ok" else {"status": status, "error": "exceeded", "wall_s": timeout}
    return run_job


def test_a_truncated_results_file_is_said_and_copied_aside_before_it_is_overwritten(crash, monkeypatch, tmp_path):
    cfg = _local(tmp_path)
    os.makedirs(cfg.out_dir)
    path = os.path.join(cfg.out_dir, "results.json")
    cut = '{"fk_version": "0", "scenarios": [{"scenario": "tiny-llama", "status": "PAS'
    with open(path, "w") as f:
        f.write(cut)
    calls, lines = [], []
    monkeypatch.setattr(engine_process, "run_job", _ok_engine(calls))
    ab.run_suite(cfg, [scenarios.load("tiny-llama")], "0", echo=lines.append)
    aside = [n for n in os.listdir(cfg.out_dir) if n.startswith("results.json.corrupt-")]
    assert len(aside) == 1 and open(os.path.join(cfg.out_dir, aside[0])).read() == cut
    assert any("is not valid JSON" in m and aside[0] in m for m in lines)
    assert json.load(open(path))["scenarios"][0]["status"] == "PASSED" and calls == ["baseline", "candidate"]


def test_a_kept_timeout_runs_again_under_another_time_limit_only(crash, monkeypatch, tmp_path):
    calls, lines = [], []
    monkeypatch.setattr(engine_process, "run_job", _ok_engine(calls, "timeout"))
    suite = [scenarios.load("tiny-llama")]
    ab.run_suite(_local(tmp_path, timeout_s=60.0), suite, "0", echo=lines.append)
    assert calls == ["baseline", "candidate"]
    calls.clear()
    res = ab.run_suite(_local(tmp_path, timeout_s=60.0), suite, "0", echo=lines.append)  # the same limit: kept
    assert calls == [] and res["scenarios"][0]["status"] == "TIMEOUT"
    monkeypatch.setattr(engine_process, "run_job", _ok_engine(calls))
    lines.clear()
    res = ab.run_suite(_local(tmp_path, timeout_s=600.0), suite, "0", echo=lines.append)
    assert calls == ["baseline", "candidate"] and res["scenarios"][0]["status"] == "PASSED"
    assert res["scenarios"][0]["timeout_s"] == 600.0
    assert any("timed out under another time limit (tiny-llama: 60 s; now 600 s)" in m for m in lines)


def _timing_engine(jobs):
    """run_job that keeps each job (as the real one does, in job.json) and times what the job asks for."""
    def run_job(python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
        jobs.append((os.path.basename(run_dir), job))
        os.makedirs(run_dir, exist_ok=True)
        res = dict(MEASURED, status="ok", wall_s=1.0, probe=WORKER_PROBE)
        if "perf" in job:
            res["perf"] = {"throughput": {"w": [{"tokens_per_s": 9.0}]}, "latency": {}}
        for name, data in (("job.json", job), ("result.json", res)):
            with open(os.path.join(run_dir, name), "w") as f:
                json.dump(data, f)
        return res
    return run_job


def test_correctness_only_runs_no_timed_phase_and_reuses_a_timed_baseline(crash, monkeypatch, tmp_path):
    from fk_adapters import report

    jobs = []
    monkeypatch.setattr(engine_process, "run_job", _timing_engine(jobs))
    suite = [scenarios.load("tiny-llama")]
    timed = _local(tmp_path)
    ab.run_suite(timed, suite, "0", echo=lambda m: None)
    assert [side for side, job in jobs] == ["baseline", "candidate"] and all("perf" in job for _, job in jobs)
    jobs.clear()
    only = _local(tmp_path, correctness_only=True, baseline_from=timed.out_dir)
    only.out_dir = str(tmp_path / "only")
    res = ab.run_suite(only, suite, "0", echo=lambda m: None)
    assert [side for side, _ in jobs] == ["candidate"] and "perf" not in jobs[0][1]
    row = res["scenarios"][0]
    assert row["status"] == "PASSED" and row["perf"] == {"throughput": {}, "latency": {}} and res["correctness_only"]
    assert "Not measured: `--correctness-only`" in report.render(res)
    # the other way round: a baseline that timed nothing cannot stand in for a timed run's
    with pytest.raises(reuse.BaselineMismatch, match=r"different job \(its perf differ"):
        reuse.reuse_run(only.out_dir, "tiny-llama", dict(jobs[0][1], perf={"repeats": 1}), "candidate")


def test_a_results_file_written_mid_suite_reads_as_failed_until_the_last_scenario():
    """An interrupted suite (killed at a hold's end, say) must leave no PASS for the scenarios it never ran."""
    res = {"scenarios": [_row("PASSED", rms_norm="exercised")]}
    finish(res, _cfg(), (1, 3))
    assert res["verdict"] == "FAIL" and res["problems"][-1].startswith("unfinished: 1 of 3 scenarios")
    finish(res, _cfg())
    assert res["verdict"] == "PASS" and not any(p.startswith("unfinished") for p in res["problems"])
    finish(res, _cfg(), (3, 3))  # the last scenario in
    assert res["verdict"] == "PASS" and not any(p.startswith("unfinished") for p in res["problems"])


def test_repeats_shape_every_process_timed_phases_and_key_the_run(tmp_path):
    sc = scenarios.load("tiny-llama")
    default = ab.scenario_job(_cfg(), sc, str(tmp_path))
    assert default["perf"]["repeats"] == sc.perf.get("repeats", 3)
    quick = ab.scenario_job(_cfg(quick=True), sc, str(tmp_path))["perf"]
    assert quick["repeats"] == 1 and quick["latency_repeats"] == default["perf"]["latency_repeats"] == 3
    once = ab.scenario_job(_cfg(repeats=1), sc, str(tmp_path))
    assert once["perf"]["repeats"] == once["perf"]["latency_repeats"] == 1
    assert once["perf"]["throughput"] == default["perf"]["throughput"]
    four = ab.scenario_job(_cfg(quick=True, repeats=4), sc, str(tmp_path))["perf"]
    assert four["repeats"] == four["latency_repeats"] == 4
    assert "perf" not in ab.scenario_job(_cfg(correctness_only=True), sc, str(tmp_path))
    assert "repeats" not in reuse.run_key(_cfg()) and reuse.run_key(_cfg(repeats=2))["repeats"] == 2


def test_warmup_share_shapes_the_job_and_keys_the_run(tmp_path):
    sc = scenarios.load("tiny-llama")
    assert "warmup_share" not in ab.scenario_job(_cfg(), sc, str(tmp_path))["perf"]
    short = ab.scenario_job(_cfg(warmup_share=0.25, repeats=1), sc, str(tmp_path))["perf"]
    assert short["warmup_share"] == 0.25 and short["repeats"] == 1
    assert "warmup_share" not in reuse.run_key(_cfg())
    assert reuse.run_key(_cfg(warmup_share=0.25))["warmup_share"] == 0.25
    assert "perf" not in ab.scenario_job(_cfg(warmup_share=0.25, correctness_only=True), sc, str(tmp_path))



def test_the_profiled_run_serves_the_largest_latency_workload(tmp_path):
    """Session 48: a profile of the correctness prompts (prefill-heavy) ran 0.86 as fast as stock where no timed
    workload ran slower than 0.93; the profiled run now serves a timed workload's requests."""
    sc = scenarios.load("fk46-llama-3.1")
    job = ab.scenario_job(_cfg(profile=True, quick=32), sc, str(tmp_path))
    assert set(job["perf"]["latency"]) == {"batch1", "batch32"} and job["profile"]["latency"] == "batch32"
    assert len(job["perf"]["latency"]["batch32"]["prompts"]) == 32
    assert ab.scenario_job(_cfg(profile=True, correctness_only=True), sc, str(tmp_path))["profile"] == ab.PROFILED_STEPS
    assert "profile" not in ab.scenario_job(_cfg(), sc, str(tmp_path))


def test_gpus_without_rounds_spread_a_suites_scenarios_one_a_gpu(tmp_path, monkeypatch):
    ran = []

    def fake_run(cfg, sc, echo):
        ran.append((sc.name, cfg.gpus))
        time.sleep(0.05)  # long enough for the other lane to take the next scenario
        return dict(_row("PASSED", rms_norm="exercised"), scenario=sc.name)

    monkeypatch.setattr(ab, "run_scenario", fake_run)
    names = [f"s{i}" for i in range(5)]
    cfg = _cfg(out_dir=str(tmp_path), gpus=("0", "1"), allow_uncovered=True)
    assert ab.spreads_scenarios(cfg) and not ab.spreads_scenarios(_cfg(gpus=("0", "1"), interleave=3))
    suite = [SimpleNamespace(name=n, model={"hidden_size": 64 * (i + 1), "num_hidden_layers": 2})
             for i, n in enumerate(names)]
    res = ab.run_suite(cfg, suite, "0.0", echo=lambda m: None)
    assert sorted(n for n, _ in ran) == names  # each scenario once
    assert [n for n, _ in ran][:2] == ["s4", "s3"]  # the largest models started first
    assert {g for _, g in ran} == {("0",), ("1",)}  # both GPUs took scenarios, one set each
    assert [r["scenario"] for r in res["scenarios"]] == names and res["verdict"] == "PASS"  # suite order kept
    assert all(0 < r["span_s"] < 5 for r in res["scenarios"])  # each scenario's own span, for its wall time
    assert all(r["devices"] == dict(ran)[r["scenario"]][0] and "side by side on GPUs 0, 1" in r["notes"][-1]
               for r in res["scenarios"])
    assert json.loads((tmp_path / "results.json").read_text())["scenarios"] == res["scenarios"]


def test_a_failing_scenario_stops_the_other_lanes_after_their_current_one(tmp_path, monkeypatch):
    ran = []

    def fake_run(cfg, sc, echo):
        ran.append(sc.name)
        if sc.name == "s0":
            raise RuntimeError("engine exploded")
        time.sleep(0.1)
        return dict(_row("PASSED", rms_norm="exercised"), scenario=sc.name)

    monkeypatch.setattr(ab, "run_scenario", fake_run)
    cfg = _cfg(out_dir=str(tmp_path), gpus=("0", "1"), allow_uncovered=True)
    with pytest.raises(RuntimeError, match="engine exploded"):
        ab.run_suite(cfg, [SimpleNamespace(name=f"s{i}") for i in range(6)], "0.0", echo=lambda m: None)
    assert len(ran) <= 3  # s0, s1 on the other GPU, at most one more taken before s0 failed


def test_a_scenario_whose_weights_fail_is_its_own_runtime_error_and_runs_again_on_resume(crash, monkeypatch, tmp_path):
    from fk_adapters import report, weights

    def checkpoint(sc, root, echo):
        if sc.name == "tiny-qwen2":
            raise weights.WeightsError("nerfstudio does not import: No module named 'msgspec'")
        return str(tmp_path / "m"), "key"

    calls, lines = [], []
    monkeypatch.setattr(ab, "scenario_checkpoint", checkpoint)
    monkeypatch.setattr(engine_process, "run_job", _ok_engine(calls))
    cfg = _local(tmp_path, allow_uncovered=True)
    suite = [scenarios.load("tiny-qwen2"), scenarios.load("tiny-llama")]
    res = ab.run_suite(cfg, suite, "0", echo=lines.append)
    bad, good = res["scenarios"]
    assert bad["status"] == "RUNTIME_ERROR" and bad["failures"] == ["seeded weights: nerfstudio does not import: "
                                                                    "No module named 'msgspec'"]
    assert bad["candidate"]["status"] == "not run" and "evidence" not in bad
    assert good["status"] == "PASSED" and calls == ["baseline", "candidate"]  # the next scenario still ran
    assert res["verdict"] == "FAIL" and "msgspec" in report.render(res)
    monkeypatch.setattr(ab, "scenario_checkpoint", lambda sc, root, echo: (str(tmp_path / "m"), "key"))
    calls.clear()
    res = ab.run_suite(cfg, suite, "0", echo=lines.append)  # resumed: only the one without weights runs again
    assert calls == ["baseline", "candidate"] and [r["status"] for r in res["scenarios"]] == ["PASSED", "PASSED"]
    assert any("whose seeded weights failed (tiny-qwen2)" in m for m in lines)


def test_a_run_under_another_tuning_environment_is_another_run(monkeypatch):
    from fk_adapters import machine

    for name in machine.tuning_env():  # TRITON_INTERPRET (tests/conftest.py), whatever the machine sets
        monkeypatch.delenv(name)
    assert "tuning_env" not in reuse.run_key(_cfg())  # a run without any keeps the key it had
    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", "1")
    assert reuse.run_key(_cfg())["tuning_env"] == {"TRITON_CACHE_AUTOTUNING": "1"}


def test_a_profiled_step_that_compiled_is_named_in_the_notes():
    notes = ab._profile_notes({}, {"profile_compiled": "fused_moe_kernel x2"})
    assert notes == ["the candidate's profiled step compiled Triton kernels (fused_moe_kernel x2): its host waits hold "
                     "the compiles"]
    assert ab._profile_notes({}, {}) == []


def test_workloads_keep_only_the_chosen_ones_with_their_requests_and_key_the_run(tmp_path):
    sc = scenarios.load("tiny-llama")
    whole = ab.scenario_job(_cfg(), sc, str(tmp_path))["perf"]
    some = ab.scenario_job(_cfg(workloads=("latency:batch1",)), sc, str(tmp_path))["perf"]
    assert some["throughput"] == {} and some["latency"] == whole["latency"]  # the very same requests
    assert some["repeats"] == whole["repeats"]
    assert "workloads" not in reuse.run_key(_cfg())
    assert reuse.run_key(_cfg(workloads=("latency:batch1",)))["workloads"] == ["latency:batch1"]


def test_the_header_names_the_variables_fk_sets_for_both_sides(tmp_path):
    """A reader of a report sees that stock ran without vLLM's AOT artifact too (session 62)."""
    for device in ("cpu", "cuda"):
        env = ab.engine_tuning_env(_cfg(device=device))
        assert env["VLLM_USE_AOT_COMPILE"] == "0"
    assert ab.engine_tuning_env(_cfg(device="cpu"))["TRITON_INTERPRET"] == "1"
