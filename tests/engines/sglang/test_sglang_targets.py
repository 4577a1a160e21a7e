"""SGLang adapter pieces that run without SGLang: targets, argument adaptation, refusals, driver parsing."""
from __future__ import annotations

import gzip
import importlib.util
import json
import types

import pytest
import torch

from fk_adapters import groups, probe, safety
from fk_adapters.engines import get
from fk_adapters.engines.sglang import driver, linear_attention, targets
from fk_adapters.kernel import Kernel
from fk_adapters.tasks import SLOTS
from tests.engines.sglang import attention_fakes, gemm_moe_fakes, linear_fakes, plugin_fakes

HAS_SGLANG = importlib.util.find_spec("sglang") is not None
LINEAR = set(linear_attention.GDN + linear_attention.SSD)  # in place on a state pool: test_sglang_linear_attention


@pytest.fixture(autouse=True)
def _clean_probe():
    for c in (probe.calls, probe.constructed, probe.not_routed, probe.stock_layers, probe.traced):
        c.clear()
    yield
    targets.Runtime.batch_invariant = staticmethod(lambda: False)


class Recorder:
    """A fake slot op: records its arguments, returns a marker (or None for in-place slots)."""

    def __init__(self, result=None):
        self.calls, self.result = [], result

    def __call__(self, *args):
        self.calls.append(args)
        return self.result


def original_recorder():
    seen = []

    def original(*args, **kwargs):
        seen.append((args, kwargs))
        return "stock"

    return original, seen


def hook_for(slot, op):
    t = targets.by_slot()[slot]
    return targets.make_hook(t, {slot: op})


def rms_layer(**kw):
    d = dict(weight=torch.nn.Parameter(torch.ones(8)), variance_epsilon=1e-5, variance_size_override=None,
             cast_x_before_out_mul=False)
    d.update(kw)
    return types.SimpleNamespace(**d)


def rope_layer(**kw):
    d = dict(head_size=16, rotary_dim=16, cos_sin_cache=torch.zeros(32, 16), is_neox_style=True)
    d.update(kw)
    return types.SimpleNamespace(**d)


def test_every_slot_has_a_target_or_a_documented_reason():
    covered = set(targets.by_slot())
    assert covered | set(targets.UNCOVERED_SLOTS) == set(SLOTS)
    for t in targets.TARGETS:
        assert t.path.startswith(("sglang.srt.layers.", "sglang.srt.distributed.parallel_state.GroupCoordinator"))
        assert t.path.endswith((".all_reduce", ".forward_cuda", ".apply",
                                "._compute_lm_head", ".forward_extend", ".forward_decode",
                                ".extend", ".packed_decode", ".decode", ".target_verify", ".mamba_chunk_scan_combined",
                                ".selective_state_update"))
        assert t.init_path.endswith(".__init__")
    assert targets.by_slot()["gemm"].path == "sglang.srt.layers.quantization.unquant.UnquantizedLinearMethod.apply"
    assert targets.by_slot()["gemm"].init_path == "sglang.srt.layers.linear.LinearBase.__init__"
    assert targets.by_slot()["rms_norm"].path == "sglang.srt.layers.layernorm.RMSNorm.forward_cuda"
    assert targets.by_slot()["rotary_embedding"].path == \
        "sglang.srt.layers.rotary_embedding.base.RotaryEmbedding.forward_cuda"
    assert "sglang.srt.layers.layernorm.GemmaRMSNorm" in targets.KNOWN_NOT_ROUTED


def test_targets_import_no_engine():
    import subprocess
    import sys

    code = ("import sys, fk_adapters.engines.sglang.targets, fk_adapters.engines.sglang.driver, "
            "fk_adapters.engines.sglang.general_plugin; assert 'sglang' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_rms_norm_plain_gets_slot_args_and_returns_new_tensor():
    out = torch.empty(3, 8)
    op = Recorder(out)
    layer, x = rms_layer(), torch.randn(3, 8)
    original, seen = original_recorder()
    assert hook_for("rms_norm", op)(original, layer, x) is out
    ((ax, aw, aeps),) = op.calls
    assert ax is x and aeps == 1e-5 and not isinstance(aw, torch.nn.Parameter)
    assert aw.data_ptr() == layer.weight.data_ptr()
    assert not seen


def test_rms_norm_higher_rank_is_flattened_like_sglang():
    op = Recorder(torch.zeros(6, 8))
    out = hook_for("rms_norm", op)(lambda *a, **k: None, rms_layer(), torch.randn(2, 3, 8))
    assert op.calls[0][0].shape == (6, 8) and out.shape == (2, 3, 8)


def test_fused_add_rms_norm_in_place_returns_x_and_residual():
    op = Recorder()
    layer, x, r = rms_layer(), torch.randn(3, 8), torch.randn(3, 8)
    original, seen = original_recorder()
    res = hook_for("fused_add_rms_norm", op)(original, layer, x, residual=r)
    assert res[0] is x and res[1] is r and not seen
    ((ax, ar, aw, aeps),) = op.calls
    assert ax is x and ar is r and aeps == 1e-5 and aw.data_ptr() == layer.weight.data_ptr()


@pytest.mark.parametrize("layer_kw, call_kw, why", [
    ({}, {"post_residual_addition": torch.zeros(3, 8)}, "post_residual_addition"),
    ({"variance_size_override": 4}, {}, "variance_size_override"),
    ({"cast_x_before_out_mul": True}, {}, "cast_x_before_out_mul"),
    ({"weight": torch.nn.Parameter(torch.ones(8, dtype=torch.float16))}, {}, "weight dtype"),
    ({}, {"residual_dtype": torch.float16}, "residual dtype"),
    ({}, {"surprise": 1}, "unknown argument 'surprise'"),
])
def test_rms_norm_unsupported_calls_run_stock_and_are_counted(layer_kw, call_kw, why):
    op = Recorder()
    layer, x = rms_layer(**layer_kw), torch.randn(3, 8)
    kw = dict(call_kw)
    kw["residual"] = torch.randn(3, 8, dtype=kw.pop("residual_dtype", torch.float32))
    original, seen = original_recorder()
    assert hook_for("fused_add_rms_norm", op)(original, layer, x, **kw) == "stock"
    assert not op.calls
    assert seen == [((layer, x), kw)]  # the original gets the call exactly as SGLang made it
    assert any(k.startswith("fused_add_rms_norm (call: ") and why in k for k in probe.not_routed)


def _call_for(slot):
    """(layer, the call's arguments after the layer with every known one given by position) for one slot."""
    x = torch.randn(3, 8)
    if slot == "rotary_embedding":
        return rope_layer(), (torch.arange(3), torch.randn(3, 64), torch.randn(3, 32), None, None)
    if slot in ("silu_and_mul", "gelu_and_mul"):
        return types.SimpleNamespace(approximate="none"), (x,)
    if slot == "gemm":  # the hooked method's self is the linear method; the layer comes first in the call
        return types.SimpleNamespace(), (types.SimpleNamespace(weight=torch.randn(4, 8)), x, None)
    if slot == "fused_moe":
        return gemm_moe_fakes.moe_method(), (gemm_moe_fakes.moe_layer(), gemm_moe_fakes.dispatch(x))
    if slot == "paged_attention":  # the hooked method's self is the attention backend
        return attention_fakes.simple_call(x)
    if slot in LINEAR:  # a GDN kernel method's self is the kernel; a Mamba2 op function has none
        return linear_fakes.simple_call(slot)
    if slot == "all_reduce":  # the hooked method's self is a routed tensor-parallel group
        return types.SimpleNamespace(unique_name="tp:0", world_size=2, _fk_routed=True), (x,)
    return rms_layer(), (x, torch.randn(3, 8) if slot == "fused_add_rms_norm" else None, None)


@pytest.mark.parametrize("slot", sorted(targets.by_slot()))
@pytest.mark.parametrize("extra_args, extra_kwargs, why", [
    ((), {"quant_linear": object()}, "unknown argument 'quant_linear'"),  # SGLang 0.5.23's RMSNorm.forward_cuda
    ((object(),), {}, "positional arguments, knows"),
])
def test_an_unseen_argument_reaches_sglangs_original_unchanged(slot, extra_args, extra_kwargs, why):
    layer, args = _call_for(slot)
    op = Recorder()
    original, seen = original_recorder()
    assert hook_for(slot, op)(original, layer, *args, *extra_args, **extra_kwargs) == "stock"
    assert not op.calls
    assert seen == [((layer, *args, *extra_args), extra_kwargs)]
    ((key, n),) = probe.not_routed.items()
    assert key.startswith(f"{slot} (call: ") and why in key and n == 1


def test_a_call_missing_an_argument_the_adapter_needs_goes_stock_not_a_type_error():
    op, (original, seen) = Recorder(), original_recorder()
    layer, pos, q = rope_layer(), torch.arange(3), torch.randn(3, 64)
    assert hook_for("rotary_embedding", op)(original, layer, pos, q) == "stock"  # a newer SGLang: key optional
    assert seen == [((layer, pos, q), {})] and not op.calls
    assert probe.not_routed == {"rotary_embedding (call: missing argument 'key')": 1}


def test_a_drifted_signature_leaves_every_call_and_layer_stock():
    why = "in-tree RMSNorm.forward_cuda(x, quant_linear, residual) is not the (x, residual) fk was written for"
    t = targets.by_slot()["rms_norm"]
    op, (original, seen) = Recorder(), original_recorder()
    assert targets.make_hook(t, {"rms_norm": op}, why)(original, rms_layer(), torch.randn(3, 8)) == "stock"
    assert not op.calls and len(seen) == 1 and probe.not_routed == {f"rms_norm (call: {why})": 1}

    class Host:
        def forward_cuda(self, x):
            return x

    def init(layer):
        layer._forward_method = layer.forward_cuda

    targets.make_init_hook(t, ("rms_norm",), lambda: Host, why)(init, Host())
    assert probe.not_routed[f"rms_norm ({why})"] == 1 and probe.stock_layers == {"rms_norm": 1}


def test_install_reads_the_installed_signature(monkeypatch):
    from fk_adapters.engines.sglang import install

    class RMSNorm:
        def forward_cuda(self, x, residual=None, post_residual_addition=None, quant_linear=None):
            pass

    class Reordered:
        def forward_cuda(self, x, quant_linear=None, residual=None):
            pass

    t = targets.by_slot()["rms_norm"]
    monkeypatch.setattr(install.pkgutil, "resolve_name", lambda path: RMSNorm)
    assert install._drift(t) == ("", "in-tree RMSNorm also takes 'quant_linear': calls passing it stay stock")
    monkeypatch.setattr(install.pkgutil, "resolve_name", lambda path: Reordered)
    assert install._drift(t)[0].startswith("in-tree Reordered.forward_cuda(x, quant_linear, residual) is not the")


def test_under_torch_compile_the_hook_goes_stock_and_counts_the_trace():
    """SGLang's tc_piecewise backend traces forward_cuda: the check and its count must not break a fullgraph trace."""
    hook = hook_for("rms_norm", Recorder())
    layer = torch.nn.Module()
    layer.weight, layer.variance_epsilon = torch.nn.Parameter(torch.ones(8)), 1e-5
    layer.variance_size_override, layer.cast_x_before_out_mul = None, False

    def original(layer, x, quant_linear=None):
        return x * quant_linear

    compiled = torch.compile(lambda x, q: hook(original, layer, x, quant_linear=q), fullgraph=True, backend="aot_eager")
    for _ in range(3):
        assert torch.equal(compiled(torch.ones(3, 8), torch.full((3, 8), 5.0)), torch.full((3, 8), 5.0))
    assert probe.not_routed == {"rms_norm (call, counted once per compiled trace: unknown argument 'quant_linear')": 1}


def test_batch_invariant_mode_and_empty_input_go_stock():
    op = Recorder()
    hook = hook_for("rms_norm", op)
    original, seen = original_recorder()
    assert hook(original, rms_layer(), torch.randn(0, 8)) == "stock"
    targets.Runtime.batch_invariant = staticmethod(lambda: True)
    assert hook(original, rms_layer(), torch.randn(3, 8)) == "stock"
    assert not op.calls and len(seen) == 2


def test_unselected_slot_runs_stock_uncounted():
    op = Recorder()
    original, seen = original_recorder()
    hook = hook_for("rms_norm", op)  # only rms_norm chosen
    assert hook(original, rms_layer(), torch.randn(3, 8), torch.randn(3, 8)) == "stock"
    assert not op.calls and not probe.not_routed


def test_silu_and_mul():
    out = torch.empty(2, 4)
    op = Recorder(out)
    x = torch.randn(2, 8)
    assert hook_for("silu_and_mul", op)(lambda *a: None, types.SimpleNamespace(), x) is out
    assert op.calls == [(x,)]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_mul_passes_approximate(approximate):
    op = Recorder(torch.empty(2, 4))
    x = torch.randn(2, 8)
    hook_for("gelu_and_mul", op)(lambda *a: None, types.SimpleNamespace(approximate=approximate), x)
    assert op.calls == [(x, approximate)]


def test_gelu_unknown_approximate_goes_stock():
    op = Recorder()
    original, seen = original_recorder()
    layer = types.SimpleNamespace(approximate="quick")
    assert hook_for("gelu_and_mul", op)(original, layer, torch.randn(2, 8)) == "stock"
    assert not op.calls and seen


def test_rotary_gets_slot_args_and_returns_query_key():
    op = Recorder()
    layer = rope_layer()
    pos, q, k = torch.arange(3), torch.randn(3, 64), torch.randn(3, 32)
    original, seen = original_recorder()
    res = hook_for("rotary_embedding", op)(original, layer, pos, q, k)
    assert res[0] is q and res[1] is k and not seen
    ((ap, aq, ak, hs, cache, neox),) = op.calls
    assert ap is pos and aq is q and ak is k and hs == 16 and cache is layer.cos_sin_cache and neox is True


@pytest.mark.parametrize("kw, layer_kw, why", [
    ({"offsets": torch.zeros(3, dtype=torch.long)}, {}, "offsets"),
    ({"fused_set_kv_buffer_arg": object()}, {}, "fused_set_kv_buffer_arg"),
    ({}, {"rotary_dim": 8}, "cos_sin_cache width"),
])
def test_rotary_unsupported_calls_run_stock(kw, layer_kw, why):
    op = Recorder()
    original, seen = original_recorder()
    layer = rope_layer(**layer_kw)
    args = (layer, torch.arange(3), torch.randn(3, 64), torch.randn(3, 32))
    assert hook_for("rotary_embedding", op)(original, *args, **kw) == "stock"
    assert not op.calls and seen == [(args, kw)]
    assert any(why in k for k in probe.not_routed)


def test_init_hook_counts_routable_and_never_routable_layers():
    class Host:
        def forward_cuda(self, x):
            return x

        def forward(self, x):
            return self._forward_method(x)

    class Sub(Host):
        def forward_cuda(self, x):  # overrides the hooked method: never ours
            return x

    def init(layer, **kw):
        layer.__dict__.update(kw)
        layer._forward_method = layer.forward_cuda

    t = targets.by_slot()["rms_norm"]
    hook = targets.make_init_hook(t, ("rms_norm",), lambda: Host)
    hook(init, Host(), weight=None)
    hook(init, Sub(), weight=None)
    hook(init, Host(), variance_size_override=4)
    assert probe.constructed["rms_norm"] == 1
    assert any("Sub" in k for k in probe.not_routed) and any("variance_size_override" in k for k in probe.not_routed)
    assert probe.stock_layers == {"rms_norm": 2}


def _kernel(slot, graph_safe):
    return Kernel(slot=slot, fn=lambda *a: None, engines=("sglang",), cuda_graph_safe=graph_safe)


def test_guard_refuses_non_graph_safe_kernel_when_graphs_are_on():
    chosen = {"rms_norm": ("p", _kernel("rms_norm", False))}
    guard = targets.ModeGuard(chosen, lambda: (False, True))
    op = guard.wrap("rms_norm", Recorder(torch.zeros(3, 8)))
    with pytest.raises(safety.UnsafeKernelError, match="cuda_graph_safe"):
        hook_for("rms_norm", op)(lambda *a: None, rms_layer(), torch.randn(3, 8))


def test_guard_allows_kernel_when_graphs_are_off_but_refuses_during_capture():
    chosen = {"rms_norm": ("p", _kernel("rms_norm", False))}
    capturing = [False]
    guard = targets.ModeGuard(chosen, lambda: (False, False), lambda: capturing[0])
    inner = Recorder(torch.zeros(3, 8))
    op = guard.wrap("rms_norm", inner)
    hook = hook_for("rms_norm", op)
    hook(lambda *a: None, rms_layer(), torch.randn(3, 8))
    assert len(inner.calls) == 1
    capturing[0] = True
    with pytest.raises(safety.UnsafeKernelError, match="capturing"):
        hook(lambda *a: None, rms_layer(), torch.randn(3, 8))


def test_guard_passes_graph_safe_kernel_under_graphs():
    chosen = {"silu_and_mul": ("p", _kernel("silu_and_mul", True))}
    guard = targets.ModeGuard(chosen, lambda: (False, True), lambda: True)
    inner = Recorder(torch.zeros(2, 4))
    guard.wrap("silu_and_mul", inner)(torch.randn(2, 8))
    assert len(inner.calls) == 1


def test_general_plugin_is_a_no_op_without_fk_plugins(monkeypatch):
    from fk_adapters.engines.sglang import general_plugin

    monkeypatch.delenv("FK_PLUGINS", raising=False)
    general_plugin.register()
    assert general_plugin._loaded_in is None


def test_engine_spec():
    spec = get("sglang")
    assert spec.devices == ("cuda",) and spec.driver == "fk_adapters.engines.sglang.driver"
    assert spec.env("cuda", "/c") == {"SGLANG_PLUGINS": "fk_adapters", "SGLANG_CACHE_DIR": "/c"}


def test_driver_engine_kwargs_translate_and_pass_through():
    job = {"model_dir": "/m", "dtype": "bfloat16", "seed": 3, "mode": "eager",
           "engine_args": {"max_model_len": 256, "max_num_seqs": 8, "enforce_eager": True,
                           "sglang": {"disable_radix_cache": True}}}
    kw, ignored = driver.engine_kwargs(job)
    assert kw == {"model_path": "/m", "skip_tokenizer_init": True, "dtype": "bfloat16", "random_seed": 3,
                  "context_length": 256, "max_running_requests": 8, "disable_radix_cache": True,
                  "disable_cuda_graph": True, "enable_multimodal": False}
    assert ignored == ["enforce_eager"]
    kw, _ = driver.engine_kwargs(dict(job, mode="compiled"))
    assert "disable_cuda_graph" not in kw
    assert "enforce_disable_flashinfer_allreduce_fusion" not in kw


def test_driver_turns_the_flashinfer_allreduce_fusion_off_under_tensor_parallelism():
    job = {"model_dir": "/m", "dtype": "bfloat16", "engine_args": {"tensor_parallel_size": 2}}
    assert driver.engine_kwargs(job)[0]["enforce_disable_flashinfer_allreduce_fusion"] is True
    own = dict(job, engine_args={"tensor_parallel_size": 2,
                                 "sglang": {"enforce_disable_flashinfer_allreduce_fusion": False}})
    assert driver.engine_kwargs(own)[0]["enforce_disable_flashinfer_allreduce_fusion"] is False


def test_driver_turns_the_radix_cache_off_unless_the_scenario_turns_prefix_caching_on():
    job = {"model_dir": "/m", "dtype": "bfloat16"}
    assert driver.engine_kwargs(job)[0]["disable_radix_cache"] is True  # repeats send the same prompts
    on = dict(job, engine_args={"enable_prefix_caching": True})
    assert driver.engine_kwargs(on)[0]["disable_radix_cache"] is False


def test_driver_serves_a_vlm_language_model_only_unless_the_scenario_says_otherwise():
    job = {"model_dir": "/m", "dtype": "bfloat16"}  # token-id prompts: no HF processor to load
    assert driver.engine_kwargs(job)[0]["enable_multimodal"] is False
    mm = dict(job, engine_args={"sglang": {"enable_multimodal": True}})
    assert driver.engine_kwargs(mm)[0]["enable_multimodal"] is True


def test_driver_maps_a_speculative_job_to_eagle3_server_args():
    from fk_adapters import scenarios

    sc = scenarios.load("fk46-eagle-3")
    job = scenarios.build_job(sc, "/m", "eager", quick=True)
    kw, _ = driver.engine_kwargs(job)
    assert {k: v for k, v in kw.items() if k.startswith("speculative_")} == {
        "speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/m/draft", "speculative_num_steps": 5,
        "speculative_eagle_topk": 8, "speculative_num_draft_tokens": 32}
    job["engine_args"]["sglang"] = {"speculative_eagle_topk": 1}  # the scenario's own SGLang args win
    assert driver.engine_kwargs(job)[0]["speculative_eagle_topk"] == 1
    sa = types.SimpleNamespace(cuda_graph_config=None, disable_cuda_graph=True, **{k: v for k, v in kw.items()
                                                                                     if k.startswith("speculative_")})
    assert driver.runtime(sa)["speculative"]["speculative_algorithm"] == "EAGLE3"
    assert "speculative" not in driver.runtime(types.SimpleNamespace(cuda_graph_config=None))


def test_driver_logprob_parsing():
    steps = [[(-0.1, 5, None), (-2.0, 7, None), (-0.5, 9, None)], None]
    assert driver.top_ids(steps) == [[5, 9, 7], []]
    entries = [(None, 1, None), (-0.3, 2, None), (-0.7, 4, None)]
    assert driver.chosen_logprobs(entries, [1, 2, 3]) == [None, -0.3, None]


def test_driver_kernel_counts_from_chrome_trace(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": "fk_rms", "dur": 2.5},
              {"ph": "X", "cat": "kernel", "name": "fk_rms", "dur": 3},
              {"ph": "X", "cat": "cpu_op", "name": "aten::add", "dur": 9}]
    with gzip.open(tmp_path / "x-TP-0.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    assert driver.kernel_counts(str(tmp_path)) == [{"trace": "x-TP-0.trace.json.gz", "rank": 0,
                                                    "kernels": {"fk_rms": 2}, "kernel_us": {"fk_rms": 5.5}}]
    timed = [dict(events[0], ts=100.0), dict(events[1], ts=110.0),  # 7.5 µs idle before the second launch
             dict(events[2], ts=90.0, pid=1, tid=1)]  # a host op: its calls and self time
    with gzip.open(tmp_path / "x-TP-0.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": timed}, f)
    (got,) = driver.kernel_counts(str(tmp_path))
    assert (got["span_us"], got["busy_us"], got["wait_us"]) == (13.0, 5.5, {"fk_rms": 7.5})
    assert (got["host_calls"], got["host_us"]) == ({"aten::add": 1}, {"aten::add": 9.0})


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_SGLANG, reason="sglang is not installed")
def test_targets_resolve_in_installed_sglang():
    import inspect
    import pkgutil

    for t in targets.TARGETS:
        fn = pkgutil.resolve_name(t.path)
        params = list(inspect.signature(fn).parameters)
        assert (params[0] == "self") == t.bound  # a Mamba2 op is a module function


def _ref_layer(slot, case_args):
    """A fake SGLang layer and call args for one catalog case (float32)."""
    if slot == "rms_norm":
        x, w, eps = case_args
        return rms_layer(weight=torch.nn.Parameter(w), variance_epsilon=eps), (x,), {}
    if slot == "fused_add_rms_norm":
        x, r, w, eps = case_args
        return rms_layer(weight=torch.nn.Parameter(w), variance_epsilon=eps), (x,), {"residual": r}
    if slot == "silu_and_mul":
        return types.SimpleNamespace(), case_args, {}
    if slot == "gelu_and_mul":
        x, approximate = case_args
        return types.SimpleNamespace(approximate=approximate), (x,), {}
    if slot in ("gemm", "fused_moe"):
        return gemm_moe_fakes.call_for_case(slot, case_args)
    if slot == "paged_attention":
        return attention_fakes.call_for_case(case_args)
    if slot == "all_reduce":  # a routed group named as the case's loopback group
        x, name = case_args
        return types.SimpleNamespace(unique_name=name, world_size=2, _fk_routed=True), (x,), {}
    pos, q, k, head_size, cache, neox = case_args
    layer = rope_layer(head_size=head_size, rotary_dim=cache.shape[-1], cos_sin_cache=cache, is_neox_style=neox)
    return layer, (pos, q, k), {}


@pytest.mark.parametrize("slot", sorted(set(targets.by_slot()) - LINEAR))
def test_hooked_call_through_a_real_op_matches_the_reference(slot):
    """The reference kernel behind ops.wrap, entered through the hook, gives the reference result."""
    from fk_adapters import ops

    s = SLOTS[slot]
    op = ops.wrap("sglang_adapter_test", s, s.reference, ("float32",))
    gen = torch.Generator().manual_seed(0)
    cases = [c for c in s.cases if c.get("activation") != "gelu_tanh"  # SGLang's MoE has erf gelu only
             and attention_fakes.plain(c)]  # SGLang's KV pool is one contiguous [slots, Hkv, D] buffer per layer
    hook = targets.make_hook(targets.by_slot()[slot], {slot: op})

    def through_hook(*case_args):
        layer, call_args, call_kw = _ref_layer(slot, case_args)
        return hook(lambda *a, **k: pytest.fail("went stock"), layer, *call_args, **call_kw)

    for case in cases:
        args = s.make_inputs(case, torch.float32, "cpu", gen)
        expected = s.run_reference(args)
        # a collective's case is rank 0 of an in-process world: every rank calls through the hook
        got = groups.run_as_every_rank(through_hook, tuple(a.clone() if isinstance(a, torch.Tensor) else a
                                                           for a in args))
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g.view(e.shape), e)  # paged_attention returns [T, Hq * Dv]
    assert probe.calls[ops.op_key("sglang_adapter_test", slot)] == sum(c.get("world", 1) for c in cases)  # every rank


def test_register_hooks_through_sglang_registry(make_plugin, monkeypatch, tmp_path):
    """register() with a fake sglang: one AROUND hook per method and per __init__, and a load record."""
    import sys

    from fk_adapters.engines.sglang import general_plugin

    registered = []
    HookType = types.SimpleNamespace(AROUND="around")
    registry = types.SimpleNamespace(register=lambda target, hook, kind: registered.append((target, kind)))
    Scheduler = type("Scheduler", (), {})
    fake = {"sglang": types.ModuleType("sglang"), "sglang.srt": types.ModuleType("sglang.srt"),
            "sglang.srt.plugins": types.ModuleType("sglang.srt.plugins"),
            "sglang.srt.plugins.hook_registry": types.ModuleType("sglang.srt.plugins.hook_registry"),
            "sglang.srt.managers": types.ModuleType("sglang.srt.managers"),
            "sglang.srt.managers.scheduler": types.ModuleType("sglang.srt.managers.scheduler")}
    fake["sglang.srt.plugins.hook_registry"].HookRegistry = registry
    fake["sglang.srt.plugins.hook_registry"].HookType = HookType
    fake["sglang.srt.managers.scheduler"].Scheduler = Scheduler
    for name, mod in fake.items():
        monkeypatch.setitem(sys.modules, name, mod)
    plugin_fakes.select_one_kernel(make_plugin, monkeypatch, tmp_path, "sglgood", "silu_and_mul")
    monkeypatch.setattr(general_plugin, "_loaded_in", None)
    general_plugin.register()
    assert registered == [("sglang.srt.layers.activation.SiluAndMul.forward_cuda", "around"),
                          ("sglang.srt.layers.activation.SiluAndMul.__init__", "around")]
    assert Scheduler.fk_probe_dump is general_plugin.fk_probe_dump
    (rec,) = probe.read_loads(str(tmp_path))
    assert rec["engine"] == "sglang" and rec["installed"]["silu_and_mul"]["plugin"] == "sglgood"
    Scheduler().fk_probe_dump(str(tmp_path / "probe"), tag="t")
    (snap,) = driver.read_probes(str(tmp_path / "probe"), "t")
    assert "calls" in snap and "not_routed" in snap and "rank" not in snap
    ranked = Scheduler()
    # a scheduler of a two-rank server (SGLang 0.5.15 keeps its ranks in a ParallelState): judged per rank, whether
    # or not a routed all-reduce group set the rank (session 28: the Triton plugin at TP=2 had none)
    ranked.ps = types.SimpleNamespace(tp_rank=1, tp_size=2)
    ranked.fk_probe_dump(str(tmp_path / "ranked"), tag="t")
    (snap,) = driver.read_probes(str(tmp_path / "ranked"), "t")
    assert (snap["rank"], snap["world_size"], snap["tp_rank"]) == (1, 2, 1)


def test_driver_reports_the_runtime_it_resolved():
    phase = types.SimpleNamespace
    sa = types.SimpleNamespace(cuda_graph_config=phase(decode=phase(backend="full"),
                                                       prefill=phase(backend="breakable")),
                               enable_torch_compile=False, attention_backend="fa3")
    assert driver.runtime(sa) == {"cuda_graphs": {"decode": "full", "prefill": "breakable"}, "torch_compile": False,
                                  "attention_backend": "fa3"}
    dsa = dict(kv_cache_dtype="bfloat16", page_size=64, dsa_prefill_backend="flashmla_sparse", dsa_decode_backend="fa3")
    assert "page_size" not in driver.runtime(types.SimpleNamespace(**vars(sa), **dsa))
    sa.attention_backend = "dsa"
    assert driver.runtime(types.SimpleNamespace(**vars(sa), **dsa)) == {
        "cuda_graphs": {"decode": "full", "prefill": "breakable"}, "torch_compile": False, "attention_backend": "dsa",
        **dsa}
