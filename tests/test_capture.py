"""fk capture without an engine: the recorder in the op body, capture mode in the loader, the workload file."""
import json
import os

import pytest
import torch

from fk_adapters import call_signature as signature, capture, engines, op_families, ops, probe, scenarios
from fk_adapters.check import value_stats
from fk_adapters.engines.loading import CAPTURE_PLUGIN, kernel_callable, load_and_install
from fk_adapters.tasks import SLOTS


def _key(*args):
    return signature.key(signature.describe(args))


def test_recorder_counts_each_distinct_signature(monkeypatch):
    monkeypatch.setenv(probe.ENV_CAPTURE, "1")
    slot = SLOTS["rms_norm"]
    op = ops.wrap("capture_test_a", slot, slot.reference, ("float32",))
    probe.reset_calls()
    w = torch.ones(16)
    a, b = torch.randn(3, 16), torch.randn(5, 16)
    strided = torch.randn(3, 32)[:, :16]  # same shape as a, other stride: another signature
    for x in (a, a, b, strided):
        op(x, w, 1e-6)
    got = probe.snapshot()["signatures"]["rms_norm"]
    assert got == {_key(a, w, 1e-6): 2, _key(b, w, 1e-6): 1, _key(strided, w, 1e-6): 1}
    assert json.loads(_key(strided, w, 1e-6))[0] == {"shape": [3, 16], "dtype": "float32", "stride": [32, 1]}
    probe.reset_calls()
    assert probe.snapshot()["signatures"] == {}
    op(a, w, 1e-6)  # still recording after a reset
    assert probe.snapshot()["signatures"] == {"rms_norm": {_key(a, w, 1e-6): 1}}


def test_recorder_keeps_the_flags_and_is_off_without_the_env(monkeypatch):
    rope = SLOTS["rotary_embedding"]
    monkeypatch.delenv(probe.ENV_CAPTURE, raising=False)
    plain = ops.wrap("capture_test_b", rope, rope.reference, ("float32",))
    monkeypatch.setenv(probe.ENV_CAPTURE, "1")
    recorded = ops.wrap("capture_test_c", rope, rope.reference, ("float32",))
    probe.reset_calls()
    gen = torch.Generator().manual_seed(0)
    cases = [next(c for c in rope.cases if c["is_neox"] is flag) for flag in (True, False)]
    neox, gptj = (rope.make_inputs(c, torch.float32, "cpu", gen) for c in cases)
    plain(*neox)  # wrapped before capture was on: counted, not recorded
    assert probe.calls[ops.op_key("capture_test_b", "rotary_embedding")] == 1 and not probe.signatures
    recorded(*neox)
    recorded(*gptj)
    sigs = [json.loads(k) for k in probe.snapshot()["signatures"]["rotary_embedding"]]
    assert sorted(s[5]["value"] for s in sigs) == [False, True]  # is_neox
    assert sorted(s[3]["value"] for s in sigs) == sorted(c["head_size"] for c in cases)


def test_recorder_samples_the_value_statistics_of_each_signature(monkeypatch):
    monkeypatch.setenv(probe.ENV_CAPTURE, "1")
    slot = SLOTS["fused_add_rms_norm"]
    op = ops.wrap("capture_test_d", slot, slot.reference, ("float32",))
    probe.reset_calls()
    gen = torch.Generator().manual_seed(0)
    w = 1.0 + 0.1 * torch.randn(64, generator=gen)
    xs = [0.02 * torch.randn(4, 64, generator=gen) for _ in range(value_stats.EVERY)]
    xs[3][1] = 0.0  # a row of exact zeros
    rs = [torch.randn(4, 64, generator=gen) for _ in xs]
    sampled = [i for i in range(len(xs)) if value_stats.sampled(i + 1)]
    assert len(sampled) == value_stats.FIRST + 1  # the first calls, then every EVERY-th
    seen = torch.stack([xs[i] for i in sampled])
    for x, r in zip(xs, rs):
        op(x.clone(), r.clone(), w, 1e-5)
    (key,), = [list(v) for v in probe.snapshot()["value_stats"].values()]
    raw = probe.snapshot()["value_stats"]["fused_add_rms_norm"][key]
    assert set(raw) == {"x", "residual", "weight"}  # the floating tensors; eps is a number
    got = value_stats.summarise(raw["x"])
    assert got["sampled_calls"] == len(sampled) and got["zeros"] == pytest.approx(64 / seen.numel())
    assert got["mean"] == pytest.approx(float(seen.double().mean()), abs=1e-9)
    assert got["std"] == pytest.approx(float(seen.double().std(unbiased=False)), rel=1e-6)
    assert got["abs_max"] == pytest.approx(float(seen.abs().max()))
    rms = seen.double().pow(2).mean(-1).sqrt()
    assert got["row_rms"] == pytest.approx([0.0, float(rms.max())])
    assert value_stats.summarise(raw["weight"])["mean"] == pytest.approx(float(w.double().mean()), rel=1e-6)
    probe.reset_calls()
    assert probe.snapshot()["value_stats"] == {}


def test_no_values_are_recorded_while_the_driver_profiles(monkeypatch, tmp_path):
    """The profiled steps' device time must be the engine's own: the driver's pause file stops the recording in
    every process of the run, and only while it exists."""
    from fk_adapters.engines.skeleton import Driver

    monkeypatch.setenv(probe.ENV_RUN_DIR, str(tmp_path))
    slot = SLOTS["silu_and_mul"]
    args, names, seen = (torch.randn(3, 8),), slot.param_names(), {}

    class Profiling(Driver):
        def profile_steps(self, prompts, max_tokens):
            value_stats.record(seen, "during", names, args, 1, probe.run_dir())
            return [{"steps": len(prompts)}]

    job = {"profile": {"requests": 2}, "correctness": {"prompts": [[1], [2], [3]]}}
    assert Profiling.__new__(Profiling).profile(job) == [{"steps": 2}]
    value_stats.record(seen, "after", names, args, 1, probe.run_dir())
    assert list(seen) == ["after"] and not (tmp_path / value_stats.PAUSE_FILE).exists()


def test_recorder_skips_kv_caches_and_outputs_not_yet_written():
    slot = SLOTS["paged_attention"]
    args = slot.make_inputs(slot.cases[0], torch.float32, "cpu", torch.Generator().manual_seed(0))
    store = {}
    value_stats.record(store, "k", slot.param_names(), args, 1)
    assert set(store["k"]) == {"q"}  # not the caches (whole engine pools), not out (garbage before the kernel)


def test_recorder_skips_the_rotary_tables():
    assert {"positions", "cos_sin_cache"} <= set(value_stats.FIXED)
    store = {}
    args = SLOTS["rotary_embedding"].make_inputs(SLOTS["rotary_embedding"].cases[0], torch.float32, "cpu",
                                                 torch.Generator().manual_seed(0))
    value_stats.record(store, "k", SLOTS["rotary_embedding"].param_names(), args, 1)
    assert set(store["k"]) == {"query", "key"}


def test_capture_mode_installs_the_recorder_in_every_slot(monkeypatch, tmp_path):
    monkeypatch.setenv(probe.ENV_CAPTURE, "1")
    monkeypatch.setenv("FK_PLUGINS", "no_such_plugin")  # user plugins are not loaded in capture mode
    monkeypatch.setenv(probe.ENV_RUN_DIR, str(tmp_path))
    natives = {s: (lambda *a, s=s: s) for s in SLOTS}
    seen = {}

    def install(chosen):
        seen.update(chosen)
        return {s: [f"Fake{s}"] for s in chosen}

    for engine, device in (("vllm", "cpu"), ("sglang", "cuda")):
        seen.clear()
        detail = load_and_install(engine, device, install, {})
        assert set(seen) == {s for s in SLOTS if engine in SLOTS[s].entries}
        assert {p for p, _ in seen.values()} == {CAPTURE_PLUGIN}
        for slot, (_, kernel) in seen.items():
            assert kernel_callable(kernel, natives) is natives[slot]  # the engine's own kernel runs
            assert kernel.cuda_graph_safe and kernel.compile_safe and set(kernel.dtypes) == {"float32", "float16",
                                                                                             "bfloat16"}
        assert detail["capture"] and detail["installed"]["rms_norm"]["entered"] == ["Fakerms_norm"]
    recs = probe.read_loads(str(tmp_path))  # the load record evidence reads, one per engine here
    assert sorted(r["engine"] for r in recs) == ["sglang", "vllm"]
    assert all(r["plugins"][0]["name"] == CAPTURE_PLUGIN
               and set(r["installed"]) == {s for s in SLOTS if r["engine"] in SLOTS[s].entries} for r in recs)


def _sig(rows):
    return signature.key([{"shape": [rows, 256], "dtype": "float32", "stride": [256, 1]}, {"value": 1e-5}])


def _snap(pid, sigs, not_routed=None):
    return {"pid": pid, "calls": {}, "signatures": sigs, "not_routed": not_routed or {}}


def _cfg(tmp_path, engine="vllm"):
    return capture.CaptureConfig(engine=engines.get(engine), device="cpu", out_dir=str(tmp_path / "wl"),
                                 model_cache=str(tmp_path / "models"), command="fk capture ...")


def test_workload_merges_workers_and_separates_engine_start(tmp_path):
    sc = scenarios.load("tiny-llama")
    res = {"status": "ok", "engine_version": "9.9",
           "probe_after_start": [_snap(1, {"rms_norm": {_sig(8192): 1}})],
           "probe": [_snap(1, {"rms_norm": {_sig(8192): 1, _sig(1): 10, _sig(4): 3}}, {"rms_norm (call: x)": 2}),
                     _snap(2, {"rms_norm": {_sig(4): 9}, "silu_and_mul": {_sig(2): 5}}, {"rms_norm (call: x)": 1})]}
    wl = capture.workload(res, sc, _cfg(tmp_path), "digest")
    assert [(e["args"][0]["shape"][0], e["calls"], e.get("startup_calls")) for e in wl["slots"]["rms_norm"]] == [
        (4, 12, None), (1, 10, None), (8192, 0, 1)]
    assert wl["total_calls"] == {"rms_norm": 22, "fused_add_rms_norm": 0, "silu_and_mul": 5, "gelu_and_mul": 0,
                                 "rotary_embedding": 0, "gemm": 0, "fused_moe": 0, "paged_attention": 0,
                                 "gated_delta_rule": 0, "gated_delta_rule_decode": 0, "ssd_chunk_scan": 0,
                                 "ssm_state_update": 0, "gated_rms_norm": 0, "all_reduce": 0}
    assert set(wl["slots"]) == {"rms_norm", "silu_and_mul"} and wl["workers"] == 2  # slots with calls
    assert wl["not_routed"] == {"rms_norm (call: x)": 3}
    assert (wl["scenario"], wl["engine"], wl["engine_version"], wl["mode"], wl["dtype"]) == (
        "tiny-llama", "vllm", "9.9", "eager", "float32")
    assert wl["model"]["hidden_size"] == 256 and "rope_scaling" not in wl["model"]
    assert "profile" not in wl  # nothing profiled (CPU, or no --profile)


def test_workload_keeps_value_statistics_merged_over_workers(tmp_path):
    def raw(total, sq, peak, calls):
        return {"elements": 512, "calls": calls, "sum": total, "sumsq": sq, "zeros": 0.0, "abs_max": peak,
                "rms_max": 0.03, "neg_rms_min": -0.01}

    sigs = {"rms_norm": {_sig(2): 3}}
    res = {"status": "ok", "probe": [
        {**_snap(1, sigs), "value_stats": {"rms_norm": {_sig(2): {"x": raw(1.0, 0.2, 0.1, 2)}}}},
        {**_snap(2, sigs), "value_stats": {"rms_norm": {_sig(2): {"x": raw(-1.0, 0.2, 0.3, 1)}}}}]}
    wl = capture.workload(res, scenarios.load("tiny-llama"), _cfg(tmp_path), "digest")
    (row,) = wl["slots"]["rms_norm"]
    assert row["value_stats"]["x"] == {"mean": 0.0, "std": pytest.approx((0.4 / 1024) ** 0.5), "abs_max": 0.3,
                                       "zeros": 0.0, "row_rms": [0.01, 0.03], "sampled_calls": 3}
    assert "value_stats" in wl["values_note"]


def test_a_profiled_capture_says_where_the_device_time_went(tmp_path):
    sc = scenarios.load("tiny-llama")
    assert "profile" in capture.capture_job(sc, "/m", quick=True, profile=True)
    res = {"status": "ok", "probe": [_snap(1, {"rms_norm": {_sig(4): 1}})],
           "profile": [{"kernels": {}, "kernel_us": {"vllm::rms_norm_kernel": 5.0, "nvjet_tst": 15.0}},
                       {"kernels": {}, "kernel_us": {"nvjet_tst": 4.0}, "slot_us": {"gemm": 4.0}}]}
    wl = capture.workload(res, sc, _cfg(tmp_path), "digest")
    assert wl["profile"]["op_shares"] == pytest.approx({"gemm": 19 / 24, "rms_norm": 5 / 24})
    assert wl["profile"]["slot_us"] == {"gemm": 4.0}  # summed over the processes' profiles, with how it was measured
    assert wl["profile"]["slot_us_from"] == op_families.SLOT_US_FROM


@pytest.fixture
def fake_engine(tmp_path, monkeypatch):
    """capture.capture with the engine run replaced: ``runs`` collects (job, env), ``result`` is what it returns."""
    state = {"runs": [], "result": {}}

    def run_job(python, driver, job, run_dir, env, timeout_s, echo=None, watch_gpu=False):
        os.makedirs(run_dir, exist_ok=True)
        state["runs"].append((job, env))
        echo("starting engine")
        return dict(state["result"], log=os.path.join(run_dir, "engine.log"), wall_s=1.0)

    monkeypatch.setattr(capture, "run_job", run_job)
    monkeypatch.setattr(capture, "scenario_checkpoint", lambda sc, root, echo: (str(tmp_path / "m"), "digest"))
    return state


def test_capture_runs_eager_in_capture_mode_and_writes_the_file(tmp_path, fake_engine):
    fake_engine["result"] = {"status": "ok", "engine_version": "9.9", "probe_after_start": [],
                             "probe": [_snap(1, {"rms_norm": {_sig(3): 2}})]}
    lines = []
    path, wl = capture.capture(_cfg(tmp_path), scenarios.load("tiny-llama"), echo=lines.append)
    assert path == str(tmp_path / "wl" / "tiny-llama" / "vllm.json")
    with open(path) as f:
        assert json.load(f) == wl
    (job, env), = fake_engine["runs"]
    assert job["mode"] == "eager" and job["perf"]["repeats"] == 1 and job["perf"]["warmup"] == 0
    assert job["correctness"]["prompts"] and job["perf"]["throughput"]
    assert env[probe.ENV_CAPTURE] == "1" and env["FK_PLUGINS"] == CAPTURE_PLUGIN
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # the engine's own environment for the device
    assert "tiny-llama [vllm] starting engine" in lines


@pytest.mark.parametrize("result, message", [
    ({"status": "crashed", "error": "engine process exited with code 1 without a result"}, "ended crashed"),
    ({"status": "timeout", "error": "engine run exceeded 5 s and was killed"}, "ended timeout"),
    ({"status": "ok", "probe": [_snap(1, {})]}, "no slot call was recorded"),
    ({"status": "ok"}, "no slot call was recorded"),
])
def test_failed_or_empty_capture_is_an_error_with_the_log(tmp_path, fake_engine, result, message):
    fake_engine["result"] = result
    with pytest.raises(capture.CaptureError, match=message) as err:
        capture.capture(_cfg(tmp_path), scenarios.load("tiny-llama"), echo=lambda m: None)
    assert str(tmp_path / "wl" / "tiny-llama" / "vllm-run" / "engine.log") in str(err.value)
    assert not (tmp_path / "wl" / "tiny-llama" / "vllm.json").exists()


def test_a_recorder_that_failed_to_install_is_an_error(tmp_path, fake_engine):
    fake_engine["result"] = {"status": "ok", "probe": [_snap(1, {"rms_norm": {_sig(3): 2}})]}
    loads = tmp_path / "wl" / "tiny-llama" / "vllm-run" / "loads"
    loads.mkdir(parents=True)
    (loads / "vllm-1.json").write_text(json.dumps({"pid": 1, "error": "RuntimeError: boom"}))
    with pytest.raises(capture.CaptureError, match="could not be installed in vllm: RuntimeError: boom"):
        capture.capture(_cfg(tmp_path), scenarios.load("tiny-llama"), echo=lambda m: None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_gpu_stats_never_sync_the_host_and_are_skipped_under_graph_capture(monkeypatch):
    monkeypatch.setenv(probe.ENV_CAPTURE, "1")
    slot = SLOTS["rms_norm"]
    op = ops.wrap("capture_test_gpu", slot, slot.reference, ("float32",))
    probe.reset_calls()
    w = torch.ones(256, device="cuda")
    eager, graphed = 0.02 * torch.randn(8, 256, device="cuda"), torch.randn(4, 256, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host sync in the recorder raises
    try:
        op(eager, w, 1e-5)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op(graphed, w, 1e-5)
    graph.replay()
    snap = probe.snapshot()
    assert snap["signatures"]["rms_norm"] == {_key(eager, w, 1e-5): 1, _key(graphed, w, 1e-5): 1}
    assert list(snap["value_stats"]["rms_norm"]) == [_key(eager, w, 1e-5)]  # nothing while capturing
    got = value_stats.summarise(snap["value_stats"]["rms_norm"][_key(eager, w, 1e-5)]["x"])
    assert got["std"] == pytest.approx(float(eager.double().std(unbiased=False)), rel=1e-5)


def test_under_tensor_parallelism_each_signature_lists_its_calls_per_rank(tmp_path):
    sc = scenarios.load("tiny-llama-tp2")
    ranked = [dict(_snap(1, {"rms_norm": {_sig(4): 5, _sig(1): 2}}), rank=0, world_size=2),
              dict(_snap(2, {"rms_norm": {_sig(4): 5}}), rank=1, world_size=2)]
    wl = capture.workload({"status": "ok", "probe": ranked}, sc, _cfg(tmp_path), "digest")
    assert wl["tensor_parallel_size"] == 2
    assert [(e["calls"], e["ranks"]) for e in wl["slots"]["rms_norm"]] == [(10, {0: 5, 1: 5}), (2, {0: 2})]
    plain = capture.workload({"status": "ok", "probe": [_snap(1, {"rms_norm": {_sig(4): 5}})]}, sc, _cfg(tmp_path), "d")
    assert "tensor_parallel_size" not in plain and "ranks" not in plain["slots"]["rms_norm"][0]


def test_a_family_with_its_own_profiled_step_is_paused_too(tmp_path, monkeypatch):
    """The items families (images, embeddings, ...) profile their own step: fk's statistics pause there too."""
    monkeypatch.setenv(probe.ENV_RUN_DIR, str(tmp_path))
    args, names, seen = (torch.randn(3, 8),), SLOTS["gemm"].param_names(), {}

    from fk_adapters.engines.skeleton import Driver

    class Items(Driver):
        def profile_job(self, job):
            value_stats.record(seen, "during", names, args, 1, probe.run_dir())
            return [{"items": True}]

    assert Items.__new__(Items).profile({"profile": {}}) == [{"items": True}]
    assert seen == {} and not (tmp_path / value_stats.PAUSE_FILE).exists()
