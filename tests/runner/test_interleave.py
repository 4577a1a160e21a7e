"""Interleaved rounds, resuming an interrupted suite: the runner with a fake engine."""
import json
import os
import time

import pytest

from fk_adapters import engines, machine, scenarios
from fk_adapters.runner import ab, engine_process, reuse


class FakeEngine:
    """Stands in for run_job: records the order of runs; baseline 100 tok/s, candidate ``speed`` x that."""

    def __init__(self, speed=1.0, fail=None, silent_round=None):
        self.calls, self.speed, self.fail, self.silent_round = [], speed, fail, silent_round

    def __call__(self, python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
        side = os.path.basename(run_dir)
        self.calls.append((side, "profile" in job))
        cand = side.startswith("candidate")
        rnd = len([c for c in self.calls if c[0].startswith(side.split("-")[0])])
        tps = 100.0 * (self.speed if cand else 1.0) * (1 + 0.01 * rnd)  # drift shared by both sides of a round
        res = {"status": "ok", "wall_s": 1.0, "run_dir": run_dir, "log": os.path.join(run_dir, "engine.log"),
               "calls": 0 if (cand and rnd == self.silent_round) else (10 if cand else 0),
               "perf": {"throughput": {"w": [{"tokens_per_s": tps}, {"tokens_per_s": tps}]},
                        "latency": {"b1": [{"latency_s": 1.0 / tps}]}}}
        if self.fail and side == self.fail:
            res.update(status="error", error="boom")
        return res


@pytest.fixture
def fake(fake_runner, monkeypatch):
    monkeypatch.setattr(ab, "correctness", lambda b, c, dtype: {"passed": True, "failures": []})

    def judge(cand, loads, mode, native=frozenset(), device=""):
        st = "exercised" if cand["calls"] else "not exercised"
        return {"workers": [{"pid": 1, "plugins_loaded": True}], "load_errors": [],
                "slots": {"rms_norm": {"plugin": "p", "status": st, "calls": cand["calls"]}}}
    return fake_runner(FakeEngine(), judge)


def _cfg(tmp_path, **kw):
    args = dict(engine=engines.get("vllm"), plugins=["p"], device="cpu", mode="eager", out_dir=str(tmp_path / "out"),
                profile=True, allow_uncovered=True)
    return ab.RunConfig(**{**args, **kw})


def test_rounds_alternate_baseline_and_candidate_and_pair_their_medians(fake, tmp_path):
    fake.speed = 0.97
    row = ab.run_scenario(_cfg(tmp_path, interleave=3), scenarios.load("tiny-llama"), echo=lambda m: None)
    assert [c[0] for c in fake.calls] == ["baseline", "candidate", "candidate-r2", "baseline-r2",
                                          "baseline-r3", "candidate-r3"]  # each side first in alternate rounds
    assert all(c[1] for c in fake.calls)  # every round profiles latency b1: each round's pair attributes its delta
    r = row["perf"]["throughput"]["w"]["tokens_per_s"]
    assert r["paired"] is True and r["rounds"] == 3 and r["ratio"] == pytest.approx(0.97)
    assert r["baseline"]["values"] == pytest.approx([101.0, 102.0, 103.0])  # one value (the median) per process
    assert r["pair_min"] == pytest.approx(0.97) and r["pair_max"] == pytest.approx(0.97)
    assert row["status"] == "PASSED" and len(row["rounds"]["runs"][1]) == 3


def test_later_rounds_skip_a_profile_that_serves_no_timed_workload(fake, tmp_path):
    """A profiled batch outside the timed workloads (a decode scenario: throughput only) attributes no timed delta:
    only round 1 profiles it (its kernels named for the proof), the later rounds spend nothing on it."""
    job = {"perf": {"throughput": {}}, "profile": dict(ab.PROFILED_STEPS)}
    runs, bad = ab._engine_runs(_cfg(tmp_path, interleave=3), scenarios.load("tiny-llama"), job, lambda m: None)
    assert not bad and [c for c in fake.calls if c[1]] == [("baseline", True), ("candidate", True)]
    assert len(runs["candidate"]) == 3


def test_alternating_the_order_cancels_a_position_effect(fake, monkeypatch, tmp_path):
    """The second process of every round runs 5% faster (as on the H100): an A/A with A B, B A ... stays at 1."""
    def second_is_faster(python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
        fake.calls.append((os.path.basename(run_dir), False))
        tps = 105.0 if len(fake.calls) % 2 == 0 else 100.0
        return {"status": "ok", "wall_s": 1.0, "run_dir": run_dir, "calls": 0,
                "perf": {"throughput": {"w": [{"tokens_per_s": tps}]}}}
    monkeypatch.setattr(engine_process, "run_job", second_is_faster)
    row = ab.run_scenario(_cfg(tmp_path, aa=True, plugins=[], interleave=4), scenarios.load("tiny-llama"),
                          echo=lambda m: None)
    r = row["perf"]["throughput"]["w"]["tokens_per_s"]
    assert r["ratio"] == pytest.approx(1.0) and r["pair_min"] == pytest.approx(100 / 105)
    assert row["rounds"]["order"] == ab.ORDER


def test_one_process_per_side_stays_unpaired(fake, tmp_path):
    row = ab.run_scenario(_cfg(tmp_path), scenarios.load("tiny-llama"), echo=lambda m: None)
    assert [c[0] for c in fake.calls] == ["baseline", "candidate"] and "rounds" not in row
    assert row["perf"]["throughput"]["w"]["tokens_per_s"]["paired"] is False


def test_a_round_whose_candidate_kernel_did_not_run_is_not_a_pass(fake, tmp_path):
    fake.silent_round = 2
    row = ab.run_scenario(_cfg(tmp_path, interleave=3), scenarios.load("tiny-llama"), echo=lambda m: None)
    assert row["status"] == "NOT_EXERCISED"
    assert row["failures"] == ["round 2: the plugin kernel did not run for rms_norm"]


def test_a_failed_later_round_stops_the_scenario_with_its_round(fake, tmp_path):
    fake.fail = "candidate-r2"
    row = ab.run_scenario(_cfg(tmp_path, interleave=4), scenarios.load("tiny-llama"), echo=lambda m: None)
    assert row["status"] == "RUNTIME_ERROR" and row["failures"] == ["candidate (round 2): boom"]
    assert len(fake.calls) == 4


def test_an_interrupted_suite_resumes_and_force_starts_over(fake, tmp_path):
    cfg = _cfg(tmp_path)
    suite = [scenarios.load("tiny-llama"), scenarios.load("tiny-qwen2")]
    ab.run_suite(cfg, suite[:1], "0", echo=lambda m: None)  # "interrupted" after the first scenario
    fake.calls.clear()
    lines = []
    res = ab.run_suite(cfg, suite, "0", echo=lines.append)
    assert [c[0] for c in fake.calls] == ["baseline", "candidate"]  # only tiny-qwen2 ran
    assert [r["scenario"] for r in res["scenarios"]] == ["tiny-llama", "tiny-qwen2"]
    assert any(line.startswith("resuming: 1 of 2") for line in lines)
    with open(os.path.join(cfg.out_dir, "results.json")) as f:
        assert len(json.load(f)["scenarios"]) == 2
    fake.calls.clear()
    ab.run_suite(_cfg(tmp_path, force=True), suite, "0", echo=lambda m: None)
    assert len(fake.calls) == 4


def test_resuming_a_different_run_is_refused(fake, tmp_path):
    ab.run_suite(_cfg(tmp_path), [scenarios.load("tiny-llama")], "0", echo=lambda m: None)
    with pytest.raises(reuse.ResumeMismatch, match="interleave: 1 there, 3 now"):
        ab.run_suite(_cfg(tmp_path, interleave=3), [scenarios.load("tiny-llama")], "0", echo=lambda m: None)


def test_changed_code_or_an_older_results_file_is_not_resumed(fake, tmp_path):
    sc = [scenarios.load("tiny-llama")]
    ab.run_suite(_cfg(tmp_path, code={"p": {"source_sha256": "a", "info": {"delay": (1, 2)}}}), sc, "0",
                 echo=lambda m: None)
    ab.run_suite(_cfg(tmp_path, code={"p": {"source_sha256": "a", "info": {"delay": (1, 2)}}}), sc, "0",
                 echo=lambda m: None)  # the same code: resumed (nothing left to run)
    assert len(fake.calls) == 2
    with pytest.raises(reuse.ResumeMismatch, match="the code of fk or of a plugin changed"):
        ab.run_suite(_cfg(tmp_path, code={"p": {"source_sha256": "b", "info": {}}}), sc, "0", echo=lambda m: None)
    path = os.path.join(_cfg(tmp_path).out_dir, "results.json")
    with open(path, "w") as f:
        json.dump({"scenarios": [{"scenario": "tiny-llama"}]}, f)  # written by an fk before run keys
    with pytest.raises(reuse.ResumeMismatch, match="did not record what it ran"):
        ab.run_suite(_cfg(tmp_path), sc, "0", echo=lambda m: None)


def test_an_aa_run_stores_its_noise_floor(fake, tmp_path):
    res = ab.run_suite(_cfg(tmp_path, aa=True, plugins=[], interleave=3), [scenarios.load("tiny-llama")], "0",
                       echo=lambda m: None)
    nf = res["noise_floor"]
    assert nf["paired"] is True and nf["intervals"] == 2 and nf["value"] == pytest.approx(0.0, abs=1e-9)


FOREIGN = {"pid": 1234, "name": "python3", "max_used_mib": 18482, "samples": 3}


def test_another_process_on_the_gpu_marks_the_timings_disturbed_not_the_correctness(fake, monkeypatch, tmp_path):
    """The H100 incident: a second `fk run` on the same GPU halved one side's throughput."""
    watched = []

    def engine(python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
        watched.append(watch_gpu)
        res = fake(python, driver, job, run_dir, env, timeout, echo)
        foreign = [FOREIGN] if os.path.basename(run_dir) == "baseline-r2" else []
        res["gpu_share"] = {"watched": True, "samples": 5, "foreign": foreign}
        return res
    monkeypatch.setattr(engine_process, "run_job", engine)
    lines = []
    res = ab.run_suite(_cfg(tmp_path, device="cuda", interleave=2), [scenarios.load("tiny-llama")], "0",
                       echo=lines.append)
    row = res["scenarios"][0]
    want = ("round 2 baseline: another process used the GPU during this run (pid 1234 python3, up to 18482 MiB): "
            "its timings are not comparable")
    assert watched == [True] * 4
    assert row["perf"]["disturbed"] == [want] and want in row["notes"]
    assert row["status"] == "PASSED" and res["verdict"] == "PASS"  # correctness and kernel evidence still hold
    assert row["rounds"]["runs"][0][1]["gpu_share"]["foreign"] == [FOREIGN]
    assert any("[baseline 2/2] WARNING: another process used the GPU" in m for m in lines)
    assert any("performance DISTURBED" in m for m in lines)


def test_a_cpu_run_does_not_watch_a_gpu_and_an_unwatched_gpu_is_said(fake, monkeypatch, tmp_path):
    watched = []

    def engine(python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
        watched.append(watch_gpu)
        res = fake(python, driver, job, run_dir, env, timeout, echo)
        if watch_gpu:
            res["gpu_share"] = {"watched": False, "why": "nvidia-smi not found"}
        return res
    monkeypatch.setattr(engine_process, "run_job", engine)
    row = ab.run_scenario(_cfg(tmp_path), scenarios.load("tiny-llama"), echo=lambda m: None)
    assert watched == [False, False] and "notes" not in row and "disturbed" not in row["perf"]
    row = ab.run_scenario(_cfg(tmp_path, device="cuda"), scenarios.load("tiny-llama"), echo=lambda m: None)
    assert row["notes"] == ["baseline, candidate: the GPU could not be watched for other processes (nvidia-smi not "
                            "found): these timings are unchecked"]
    assert "disturbed" not in row["perf"] and row["status"] == "PASSED"


def test_a_disturbed_aa_run_stores_no_noise_floor_from_it(fake, monkeypatch, tmp_path):
    def engine(python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
        return dict(fake(python, driver, job, run_dir, env, timeout, echo),
                    gpu_share={"watched": True, "samples": 5, "foreign": [FOREIGN]})
    monkeypatch.setattr(engine_process, "run_job", engine)
    res = ab.run_suite(_cfg(tmp_path, device="cuda", aa=True, plugins=[], interleave=2),
                       [scenarios.load("tiny-llama")], "0", echo=lambda m: None)
    assert res["scenarios"][0]["perf"]["disturbed"] and res["noise_floor"] is None


def test_a_reused_baseline_brings_the_gpu_watch_of_its_run(fake, tmp_path):
    sc = scenarios.load("tiny-llama")
    prev = tmp_path / "prev" / "logs" / sc.name / "baseline"
    prev.mkdir(parents=True)
    job = ab.build_job(sc, str(tmp_path / "m"), "eager", False, engine="vllm")
    job["profile"] = ab.profiled_run(job)
    base = fake("py", "drv", job, str(prev), {}, 1.0)
    for name, data in (("job.json", job), ("result.json", base),
                       ("gpu_share.json", {"watched": True, "samples": 3, "foreign": [FOREIGN]}),
                       ("machine.json", {"machine": machine.identity(), "finished": time.time() - 90})):
        (prev / name).write_text(json.dumps(data))
    row = ab.run_scenario(_cfg(tmp_path, baseline_from=str(tmp_path / "prev")), sc, echo=lambda m: None)
    assert row["baseline"]["reused_from"] == str(prev)
    assert 90 <= row["baseline"]["reused_age_s"] < 120
    assert row["perf"]["disturbed"] == ["baseline: another process used the GPU during this run (pid 1234 python3, "
                                        "up to 18482 MiB): its timings are not comparable"]


def test_a_baseline_from_another_machine_or_hold_is_not_reused(fake, tmp_path):
    """Timings of another machine hold are not comparable: the reuse is refused, and one that records no machine too."""
    sc = scenarios.load("tiny-llama")
    prev = tmp_path / "prev" / "logs" / sc.name / "baseline"
    prev.mkdir(parents=True)
    job = ab.build_job(sc, str(tmp_path / "m"), "eager", False, engine="vllm")
    (prev / "job.json").write_text(json.dumps(job))
    (prev / "result.json").write_text(json.dumps(fake("py", "drv", job, str(prev), {}, 1.0)))
    cfg = _cfg(tmp_path, baseline_from=str(tmp_path / "prev"))
    with pytest.raises(reuse.BaselineMismatch, match="it records none"):
        ab.run_scenario(cfg, sc, echo=lambda m: None)
    other = dict(machine.identity(), hold="an earlier hold")
    (prev / "machine.json").write_text(json.dumps({"machine": other, "finished": time.time()}))
    with pytest.raises(reuse.BaselineMismatch, match="another host, boot or hold"):
        ab.run_scenario(cfg, sc, echo=lambda m: None)


class OnDevices(FakeEngine):
    """Records each run's device set and round; a run takes 0.2 s, so rounds side by side overlap in time."""

    def __call__(self, python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
        side = os.path.basename(run_dir)
        rnd = int(side.split("-r")[1]) if "-r" in side else 1
        start = time.monotonic()
        time.sleep(0.2)
        self.calls.append((side, env.get("CUDA_VISIBLE_DEVICES"), rnd, start, time.monotonic()))
        cand = side.startswith("candidate")
        tps = 100.0 * (self.speed if cand else 1.0) * (1 + 0.01 * rnd)
        res = {"status": "ok", "wall_s": 0.2, "run_dir": run_dir, "calls": 10 if cand else 0,
               "perf": {"throughput": {"w": [{"tokens_per_s": tps}]}}}
        if self.fail and side == self.fail:
            res.update(status="error", error="boom")
        return res


def test_rounds_after_the_first_run_side_by_side_one_device_set_each(fake, monkeypatch, tmp_path):
    eng = OnDevices(speed=0.97)
    monkeypatch.setattr(engine_process, "run_job", lambda *a, **k: eng(*a, **k))
    row = ab.run_scenario(_cfg(tmp_path, device="cuda", interleave=5, gpus=("0", "1")), scenarios.load("tiny-llama"),
                          echo=lambda m: None)
    by_round = {}
    for side, dev, rnd, start, end in eng.calls:
        by_round.setdefault(rnd, []).append((side.split("-")[0], dev, start, end))
    assert [d for _, d, _, _ in by_round[1]] == ["0", "0"]  # round 1 alone, on the first set
    assert {rnd: {d for _, d, _, _ in runs} for rnd, runs in by_round.items()} == {
        1: {"0"}, 2: {"0"}, 3: {"1"}, 4: {"0"}, 5: {"1"}}  # each round's pair on one set
    for rnd in (2, 4):  # each side first in alternate rounds, as without --gpus
        assert [s for s, *_ in by_round[rnd]] == ["candidate", "baseline"]
        assert [s for s, *_ in by_round[rnd + 1]] == ["baseline", "candidate"]
    assert by_round[3][0][2] < by_round[2][-1][3]  # rounds 2 and 3 overlapped in time
    assert by_round[2][0][2] > by_round[1][-1][3]  # round 1 (it warms the compile caches) ran before them
    r = row["perf"]["throughput"]["w"]["tokens_per_s"]
    assert r["rounds"] == 5 and r["ratio"] == pytest.approx(0.97)
    assert r["baseline"]["values"] == pytest.approx([101.0, 102.0, 103.0, 104.0, 105.0])  # in round order
    assert row["status"] == "PASSED" and any("side by side on GPUs 0, 1" in n for n in row["notes"])


def test_a_round_failing_side_by_side_names_its_round(fake, monkeypatch, tmp_path):
    eng = OnDevices(fail="baseline-r3")
    monkeypatch.setattr(engine_process, "run_job", lambda *a, **k: eng(*a, **k))
    row = ab.run_scenario(_cfg(tmp_path, device="cuda", interleave=4, gpus=("0", "1")), scenarios.load("tiny-llama"),
                          echo=lambda m: None)
    assert row["status"] != "PASSED" and "baseline (round 3): boom" in row["failures"]
    assert max(rnd for *_, rnd, _, _ in eng.calls) == 3  # round 4 never started


def test_side_by_side_runs_one_call_in_this_thread_and_raises_a_worker_error():
    import threading

    assert ab.side_by_side(lambda: threading.current_thread(), [()]) == [threading.main_thread()]
    seen = ab.side_by_side(lambda x: (x, threading.current_thread().daemon), [(1,), (2,)])
    assert seen == [(1, True), (2, True)]  # daemon threads: an interrupted fk does not wait for its engine runs

    def boom(x):
        raise RuntimeError(f"round {x}")
    with pytest.raises(RuntimeError, match="round"):
        ab.side_by_side(boom, [(1,), (2,)])


def test_every_vllm_process_is_traced_stock_too_so_both_sides_load_their_compiled_code_alike(tmp_path):
    """The candidate's trace is the native path's proof; stock loading an AOT artifact instead built vLLM's own
    Triton kernels with another ptxas and tuned them apart (session 62)."""
    sc = scenarios.load("tiny-llama")
    for device in ("cpu", "cuda"):
        cfg = _cfg(tmp_path, device=device)
        assert engine_process.env(cfg, sc, ["p"])["VLLM_USE_AOT_COMPILE"] == "0"
        assert engine_process.env(cfg, sc, [])["VLLM_USE_AOT_COMPILE"] == "0"


# ------------------------------------------------------------- --with-aa: the A/A of the same rounds, beside the A/B


def test_with_aa_each_round_runs_a_second_stock_process_every_place_and_order_in_turn(fake, tmp_path):
    fake.speed = 0.97
    row = ab.run_scenario(_cfg(tmp_path, interleave=3, with_aa=True), scenarios.load("tiny-llama"),
                          echo=lambda m: None)
    assert [c[0] for c in fake.calls] == ["baseline", "candidate", "aa", "aa-r2", "candidate-r2", "baseline-r2",
                                          "candidate-r3", "aa-r3", "baseline-r3"]
    orders = ["".join(s[0] for s in ab._round_order(r, True)) for r in range(1, 13)]
    assert sorted(orders[:6]) == sorted({"bca", "bac", "cab", "cba", "abc", "acb"})  # 6 rounds: every order once
    for n in range(2, 13):  # every pair in either order equally often after an even number of rounds, else 1 apart
        for first, second in (("b", "c"), ("c", "a"), ("b", "a")):
            ahead = sum(o.index(first) < o.index(second) for o in orders[:n])
            assert abs(2 * ahead - n) == n % 2, (n, first, second, ahead)
    assert [c[0] for c in fake.calls if not c[1]] == ["aa", "aa-r2", "aa-r3"]  # the partner is never profiled
    assert row["status"] == "PASSED" and row["perf"]["throughput"]["w"]["tokens_per_s"]["ratio"] == pytest.approx(0.97)
    aa = row[ab.AA_PARTNER]
    assert aa["status"] == "PASSED" and aa["perf"]["throughput"]["w"]["tokens_per_s"]["ratio"] == pytest.approx(1.0)
    assert aa["rounds"]["runs"][0] == row["rounds"]["runs"][0]  # the same stock processes on both rows
    assert len(aa["rounds"]["runs"][1]) == 3
    assert row["rounds"]["order"] == aa["rounds"]["order"] == ab.ORDER_WITH_AA and "evidence" not in aa


def test_a_with_aa_run_writes_its_aa_results_and_judges_the_candidate_against_them(fake, tmp_path):
    from fk_adapters import compare

    fake.speed = 0.90
    results = ab.run_suite(_cfg(tmp_path, interleave=3, with_aa=True), [scenarios.load("tiny-llama")], "0.32.0",
                           echo=lambda m: None)
    with open(tmp_path / "out" / "aa" / "results.json") as f:
        aa = json.load(f)
    assert aa["aa"] is True and aa["candidate"] == "baseline (A/A)" and aa["verdict"] == "PASS"
    assert results["with_aa"] == {"results": os.path.join("aa", "results.json"), "verdict": "PASS",
                                  "noise_floor": aa["noise_floor"]}
    from fk_adapters import report
    from fk_adapters.results.records import RunResults
    header = "\n".join(report._header(RunResults.from_dict(results)))
    assert "with the A/A of the same rounds (a second stock process in each): noise floor ±0.00% (`aa/results.json`, " \
           "PASS)" in header
    assert aa["noise_floor"]["value"] == pytest.approx(0.0, abs=1e-9)  # the fake's stock processes agree
    cmp = compare.compare(aa, results, noise_floor=compare.noise_floor_from_aa(aa))
    tput = next(p for p in cmp["perf"] if p["kind"] == "throughput")
    assert tput["delta"]["method"].startswith("t over rounds (shared baselines")
    assert tput["delta"]["ratio"] == pytest.approx(0.90) and tput["verdict"] == "slower"


# ------------------------------------------------------------- --time-budget: no round started that would end past it


@pytest.fixture
def fifty_second_runs(fake, monkeypatch):
    """The fake engine's processes take 50 s each of a fake clock that starts at 1000 s (the first ones: the seconds
    listed in ``fake.seconds``)."""
    clock = {"now": 1000.0}
    monkeypatch.setattr(ab.time, "time", lambda: clock["now"])
    engine = engine_process.run_job
    fake.seconds = []

    def slow(*args, **kw):
        secs = fake.seconds.pop(0) if fake.seconds else 50.0
        clock["now"] += secs
        return dict(engine(*args, **kw), wall_s=secs)
    monkeypatch.setattr(engine_process, "run_job", slow)
    return fake


def test_a_time_budget_starts_no_round_that_would_end_past_it_and_judges_those_that_ran(fifty_second_runs, tmp_path):
    fake = fifty_second_runs
    fake.speed = 0.97
    said = []
    row = ab.run_scenario(_cfg(tmp_path, interleave=5, stop_by=1000.0 + 350.0), scenarios.load("tiny-llama"),
                          echo=said.append)
    assert len(fake.calls) == 6  # rounds 1-3 end at 300 s; a fourth would end at 400 s, past 350 s
    assert row["rounds"]["planned"] == 5 and row["rounds"]["ran"] == 3
    assert row["notes"][0].startswith("3 of the 5 planned rounds ran: the next would have ended past --time-budget")
    assert any("round 4 of 5 not started" in m for m in said)
    r = row["perf"]["throughput"]["w"]["tokens_per_s"]
    assert r["rounds"] == 3 and r["ratio"] == pytest.approx(0.97)


def test_rounds_after_the_second_are_judged_by_the_warm_rounds_not_round_1s_cold_start(fifty_second_runs, tmp_path):
    """Round 1's processes take 150 s each (cold compiles), later ones 50 s: with 650 s, round 2 is judged by round 1
    (300 s), rounds 3 and 4 by round 2 (100 s); judged by round 1 alone the run would stop after 2 rounds."""
    fake = fifty_second_runs
    fake.seconds = [150.0, 150.0]
    said = []
    row = ab.run_scenario(_cfg(tmp_path, interleave=5, stop_by=1000.0 + 650.0), scenarios.load("tiny-llama"),
                          echo=said.append)
    assert row["rounds"]["ran"] == 4 and len(fake.calls) == 8  # rounds end at 300, 400, 500, 600 s
    assert any("round 5 of 5 not started: as long as the longest round after the first (100 s)" in m for m in said)


def test_without_a_time_budget_every_planned_round_runs(fake, tmp_path):
    row = ab.run_scenario(_cfg(tmp_path, interleave=4), scenarios.load("tiny-llama"), echo=lambda m: None)
    assert len(fake.calls) == 8 and "ran" not in row["rounds"]


def test_rounds_a_time_budget_cut_below_three_carry_no_interval(fifty_second_runs, tmp_path):
    from fk_adapters import report, variation
    from fk_adapters.results.records import RunResults

    results = ab.run_suite(_cfg(tmp_path, interleave=5, stop_by=1000.0 + 250.0), [scenarios.load("tiny-llama")],
                           "0.32.0", echo=lambda m: None)
    assert results["interleave"] == 5 and variation.rounds(results) == 2  # planned 5; 2 ran
    assert variation.why_not(results).startswith("2 interleaved rounds: too few for an interval")
    run = RunResults.from_dict(results)
    assert variation.interval(results["scenarios"][0]["perf"]["throughput"]["w"]["tokens_per_s"], results) is None
    assert "2 interleaved rounds (of 5 planned: --time-budget)" in "\n".join(report._perf_lines(run, []))
    lines = []  # run again into the same --out on another engine build: the cut scenario runs every round again
    again = ab.run_suite(_cfg(tmp_path, interleave=5), [scenarios.load("tiny-llama")], "0.33.0", echo=lines.append)
    assert any("running again 1 scenario(s) that --time-budget stopped" in m and "engine_version: '0.32.0' there, "
               "'0.33.0' here" in m for m in lines)
    assert variation.rounds(again) == 5 and "ran" not in again["scenarios"][0]["rounds"]


@pytest.fixture
def written_runs(fifty_second_runs, monkeypatch):
    """fifty_second_runs whose processes leave job.json and result.json in their folders, as engine processes do."""
    inner = engine_process.run_job

    def write(python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
        res = inner(python, driver, job, run_dir, env, timeout, echo, watch_gpu)
        os.makedirs(run_dir, exist_ok=True)
        for name, data in (("job.json", job), ("result.json", {k: v for k, v in res.items() if k != "wall_s"})):
            with open(os.path.join(run_dir, name), "w") as f:
                json.dump(data, f)
        return res
    monkeypatch.setattr(engine_process, "run_job", write)
    return fifty_second_runs


def _cut_after_two(tmp_path, **kw):
    """A 5-round run that --time-budget cut after round 2 (the fake clock's processes: 50 s each)."""
    budget = 350.0 if kw.get("with_aa") else 250.0  # 2 or 3 processes a round
    return ab.run_suite(_cfg(tmp_path, interleave=5, stop_by=1000.0 + budget, **kw), [scenarios.load("tiny-llama")],
                        "0.32.0", echo=lambda m: None)


def test_a_cut_scenario_keeps_its_rounds_and_runs_only_the_rest(written_runs, tmp_path):
    """The same command into the same --out, later (a later machine hold): rounds 1-2 are kept, rounds 3-5 run, and
    the row judges all 5 (an interval), saying where its rounds came from."""
    from fk_adapters import variation

    fake = written_runs
    fake.speed = 0.97
    _cut_after_two(tmp_path)
    before, lines = len(fake.calls), []
    again = ab.run_suite(_cfg(tmp_path, interleave=5), [scenarios.load("tiny-llama")], "0.32.0", echo=lines.append)
    assert [c[0] for c in fake.calls[before:]] == ["baseline-r3", "candidate-r3", "candidate-r4", "baseline-r4",
                                                   "baseline-r5", "candidate-r5"]
    assert any("resuming 1 scenario(s) that --time-budget stopped before their last round: tiny-llama after round 2"
               in m for m in lines)
    row = again["scenarios"][0]
    assert variation.rounds(again) == 5 and row["rounds"]["kept"] == 2 and "ran" not in row["rounds"]
    assert row["notes"][0].startswith("rounds 1-2 were kept from an earlier run into this folder")
    assert row["notes"][0].endswith("made on this machine hold")
    r = row["perf"]["throughput"]["w"]["tokens_per_s"]
    assert r["rounds"] == 5 and r["ratio"] == pytest.approx(0.97)
    assert row["status"] == "PASSED"
    assert [p["wall_s"] for p in row["rounds"]["runs"][1]] == [50.0] * 5  # the kept rounds keep their seconds


def test_rounds_from_another_machine_hold_are_kept_said_and_the_next_round_is_judged_as_cold(written_runs,
                                                                                            monkeypatch, tmp_path):
    fake = written_runs
    fake.seconds = [150.0, 150.0]  # round 1 cold: 300 s; later rounds 100 s
    first = ab.run_suite(_cfg(tmp_path, interleave=5, stop_by=1000.0 + 650.0), [scenarios.load("tiny-llama")],
                         "0.32.0", echo=lambda m: None)
    k = first["scenarios"][0]["rounds"]["ran"]
    assert k == 4
    monkeypatch.setattr(ab.machine, "identity", lambda: {"host": "other", "boot_id": "b", "hold": "h"})
    lines = []  # a new machine: its first round compiles again, so it is judged by round 1's 300 s, not by 100 s
    cut = ab.run_suite(_cfg(tmp_path, interleave=5, stop_by=ab.time.time() + 250.0), [scenarios.load("tiny-llama")],
                       "0.32.0", echo=lines.append)
    assert any("round 5 of 5 not started: as long as round 1 (300 s)" in m for m in lines)
    assert any("rounds 1-4 kept from the earlier run" in m and "made on another machine hold" in m for m in lines)
    assert cut["scenarios"][0]["rounds"]["ran"] == 4
    row = ab.run_suite(_cfg(tmp_path, interleave=5), [scenarios.load("tiny-llama")], "0.32.0",
                       echo=lambda m: None)["scenarios"][0]
    assert row["rounds"]["kept"] == 4 and "another machine hold with the same GPUs and engine build" in row["notes"][0]
    assert row["perf"]["throughput"]["w"]["tokens_per_s"]["rounds"] == 5


def test_rounds_whose_processes_are_gone_are_not_kept(written_runs, tmp_path):
    fake = written_runs
    _cut_after_two(tmp_path)
    os.remove(os.path.join(tmp_path, "out", "logs", "tiny-llama", "candidate-r2", "result.json"))
    before, lines = len(fake.calls), []
    row = ab.run_suite(_cfg(tmp_path, interleave=5), [scenarios.load("tiny-llama")], "0.32.0",
                       echo=lines.append)["scenarios"][0]
    assert len(fake.calls) - before == 10 and "kept" not in row["rounds"]
    assert any("the earlier rounds are not kept" in m and "all 5 rounds run" in m for m in lines)


def test_with_aa_the_partners_rounds_are_kept_too(written_runs, tmp_path):
    fake = written_runs
    _cut_after_two(tmp_path, with_aa=True)
    before = len(fake.calls)
    row = ab.run_suite(_cfg(tmp_path, interleave=5, with_aa=True), [scenarios.load("tiny-llama")], "0.32.0",
                       echo=lambda m: None)["scenarios"][0]
    assert len(fake.calls) - before == 9 and not any(c[0] in ("aa", "aa-r2") for c in fake.calls[before:])
    assert row["aa"]["perf"]["throughput"]["w"]["tokens_per_s"]["rounds"] == 5
    assert row["rounds"]["kept"] == 2


def test_a_with_aa_run_cut_below_three_rounds_judges_no_delta_against_its_aa(written_runs, tmp_path):
    """On CPU a --time-budget that let one round run read the do-nothing plugin 17% slower than its A/A's single pair
    and called it a regression: under 3 rounds the A/A's reach is no floor, so compare-aa is INCOMPLETE."""
    from fk_adapters.cli import run_cmd

    fake = written_runs
    fake.speed = 0.80  # as far off as one CPU pair can read
    results = _cut_after_two(tmp_path, with_aa=True)
    run_cmd._beside_aa(str(tmp_path / "out"), results)
    with open(tmp_path / "out" / "compare-aa" / "compare.json") as f:
        cmp = json.load(f)
    assert cmp["verdict"] == "INCOMPLETE" and not cmp["problems"]
    assert cmp["limitations"][0].startswith("the A/A of the same rounds ran 2 round(s), fewer than 3")
    full = ab.run_suite(_cfg(tmp_path, interleave=5, with_aa=True), [scenarios.load("tiny-llama")], "0.32.0",
                        echo=lambda m: None)  # the same command later: rounds 3-5 run, and the delta is judged
    run_cmd._beside_aa(str(tmp_path / "out"), full)
    with open(tmp_path / "out" / "compare-aa" / "compare.json") as f:
        cmp = json.load(f)
    assert cmp["verdict"] == "FAIL" and any("slower" in p for p in cmp["problems"])
