"""SGLang's diffusion runtime without SGLang: its DiT attention implementations mapped onto the sdpa slot
([B, S, H, D] <-> [B, H, L, D]), what stays stock and why, the SRT adapters it shares, and the registration a spawned
diffusion worker runs (hooks applied there, probe requests answered by its scheduler)."""
from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import torch

from fk_adapters import probe
from fk_adapters.engines import loading
from fk_adapters.engines.sglang import diffusion_targets, targets
from fk_adapters.tasks import SLOTS


@pytest.fixture(autouse=True)
def _clean_probe():
    for c in (probe.calls, probe.constructed, probe.not_routed, probe.stock_layers, probe.traced, probe.native_path):
        c.clear()


def _hook(cls_name):
    target = next(t for t in diffusion_targets.TARGETS if t.cls.endswith(cls_name))
    seen = []

    def op(*args):
        seen.append(args)
        return SLOTS["sdpa"].reference(*args)

    return targets.make_hook(target, {"sdpa": op}), seen


def _stock(*args, **kwargs):
    return "stock"


def _qkv(b=2, s=7, hq=4, hkv=2, d=32, sk=None):
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(b, s, hq, d, generator=gen), torch.randn(b, sk or s, hkv, d, generator=gen),
            torch.randn(b, sk or s, hkv, d, generator=gen))


def _torch_sdpa(q, k, v, causal, scale):
    """What SGLang's own SDPAImpl computes on [B, S, H, D] (torch's kernel, GQA enabled)."""
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           is_causal=causal, scale=scale, enable_gqa=True)
    return out.transpose(1, 2)


@pytest.mark.parametrize("cls_name,causal", [("FlashAttentionImpl", False), ("FlashAttentionImpl", True),
                                             ("SDPAImpl", False)])
def test_a_dense_dit_attention_call_runs_the_slot_on_transposed_views(cls_name, causal):
    hook, seen = _hook(cls_name)
    q, k, v = _qkv()
    impl = NS(causal=causal, softmax_scale=0.2, dropout=0.0)
    out = hook(_stock, impl, q, k, v, None)
    (args,) = seen
    assert args[0].shape == (2, 4, 7, 32) and args[3:] == (None, causal, 0.2)  # [B, H, L, D], no mask
    assert out.shape == q.shape and out.is_contiguous()
    torch.testing.assert_close(out, _torch_sdpa(q, k, v, causal, 0.2), atol=1e-5, rtol=1e-5)
    assert not probe.not_routed


def test_flash_attention_metadata_that_matches_the_tensors_routes():
    hook, seen = _hook("FlashAttentionImpl")
    q, k, v = _qkv()
    md = NS(max_seqlen_q=7, max_seqlen_k=7)
    assert hook(_stock, NS(causal=False, softmax_scale=0.2), q, k, v, md) is not None and seen


@pytest.mark.parametrize("case,why", [
    ({"return_softmax_lse": True}, "unknown argument 'return_softmax_lse'"),
    ({"attn_metadata": NS(max_seqlen_q=5, max_seqlen_k=7)}, "metadata sequence lengths"),
    ({"causal": True, "sk": 9}, "bottom-right"),
    ({"hq": 3}, "3 query heads over 2 kv heads"),
])
def test_flash_attention_calls_the_slot_cannot_express_stay_stock_with_why(case, why):
    hook, seen = _hook("FlashAttentionImpl")
    q, k, v = _qkv(hq=case.get("hq", 4), sk=case.get("sk"))
    impl = NS(causal=case.get("causal", False), softmax_scale=0.2)
    kwargs = {"return_softmax_lse": True} if case.get("return_softmax_lse") else {}
    assert hook(_stock, impl, q, k, v, case.get("attn_metadata"), **kwargs) == "stock" and not seen
    assert any(k.startswith("sdpa (call") and why in k for k in probe.not_routed)


def test_torch_sdpa_with_dropout_stays_stock():
    hook, seen = _hook("SDPAImpl")
    q, k, v = _qkv()
    assert hook(_stock, NS(causal=False, softmax_scale=0.2, dropout=0.1), q, k, v, None) == "stock" and not seen
    assert any(k.startswith("sdpa (call") and "dropout 0.1" in k for k in probe.not_routed)


def test_no_kernel_chosen_for_sdpa_leaves_every_call_stock_uncounted():
    target = next(t for t in diffusion_targets.TARGETS if t.cls.endswith("FlashAttentionImpl"))
    q, k, v = _qkv()
    assert targets.make_hook(target, {})(_stock, NS(causal=False, softmax_scale=0.2), q, k, v) == "stock"
    assert not probe.not_routed


def test_the_passthrough_leaves_each_attention_call_on_its_own_kernel_counted(monkeypatch):
    """A passthrough (the engine's own kernel: FA3 here, torch's SDPA in the CLIP encoder) routes nothing: each
    routable call stays on its implementation's own path and is counted there."""
    monkeypatch.setitem(loading.ENGINE_OWN, "sdpa", "passthrough:sdpa")
    q, k, v = _qkv()
    for cls_name in ("FlashAttentionImpl", "SDPAImpl"):
        hook, seen = _hook(cls_name)
        assert hook(_stock, NS(causal=False, softmax_scale=0.2, dropout=0.0), q, k, v, None) == "stock"
        assert seen == []
    assert probe.native_path["passthrough:sdpa"] == 2


def test_the_diffusion_linear_and_norm_share_srt_adapters_and_their_signatures():
    """The multimodal_gen methods take SRT's leading parameters (the 0.5.15 wheel: docs/design/sglang-diffusion.md)."""
    by_cls = {t.cls.rsplit(".", 1)[1]: t for t in diffusion_targets.TARGETS}
    assert by_cls["UnquantizedLinearMethod"].params.names[:2] == ("layer", "x")
    assert by_cls["RMSNorm"].params.names[:2] == ("x", "residual")
    assert all(t.cls.startswith("sglang.multimodal_gen.runtime.layers.") for t in diffusion_targets.TARGETS)
    assert {s for t in diffusion_targets.TARGETS for s in t.slots} <= set(SLOTS)


def _fake_sglang(monkeypatch, registered, applied, hooks=None):
    import sys
    import types

    def register(target, hook, kind):
        registered.append((target, kind))
        if hooks is not None:
            hooks[target] = hook

    names = ["sglang", "sglang.srt", "sglang.srt.plugins", "sglang.srt.plugins.hook_registry", "sglang.multimodal_gen",
             "sglang.multimodal_gen.runtime", "sglang.multimodal_gen.runtime.pipelines_core",
             "sglang.multimodal_gen.runtime.pipelines_core.schedule_batch"]
    fake = {name: types.ModuleType(name) for name in names}
    fake["sglang.srt.plugins.hook_registry"].HookType = NS(AROUND="around")
    fake["sglang.srt.plugins.hook_registry"].HookRegistry = NS(register=register, apply_hooks=lambda: applied.append(1))
    fake["sglang.multimodal_gen.runtime.pipelines_core.schedule_batch"].OutputBatch = lambda: "done"
    for name, mod in fake.items():
        monkeypatch.setitem(sys.modules, name, mod)


def test_register_in_a_diffusion_worker_hooks_its_runtime_applies_them_and_answers_probe_requests(
        make_plugin, monkeypatch, tmp_path):
    """register() with a fake sglang, as the driver's top level runs it in a spawned worker: the diffusion runtime's
    RMSNorm is hooked (never SRT's) and so is the diffusers fallback's pipeline loading, the hooks are applied (no
    load_plugins() there), and the worker's scheduler answers fk's probe requests by type."""
    from fk_adapters.engines.sglang import diffusion, diffusion_fallback, driver
    from tests.engines.sglang import plugin_fakes

    registered, applied = [], []
    _fake_sglang(monkeypatch, registered, applied)
    plugin_fakes.select_one_kernel(make_plugin, monkeypatch, tmp_path, "sgldiff", "rms_norm")
    monkeypatch.setattr(diffusion, "_loaded_in", None)
    diffusion.register()
    diffusion.register()  # once per process
    mg = "sglang.multimodal_gen.runtime.layers.layernorm.RMSNorm"
    assert registered == [(f"{mg}.forward_cuda", "around"), (f"{mg}.__init__", "around"),
                          (diffusion.SCHEDULER_INIT, "around"), (diffusion_fallback.LOAD, "around")] and applied == [1]
    (rec,) = probe.read_loads(str(tmp_path))
    assert rec["installed"]["rms_norm"]["plugin"] == "sgldiff"
    assert rec["installed"]["rms_norm"]["entered"][-1] == diffusion_fallback.WHERE

    scheduler = NS(request_handlers={"Req": "generation"})
    diffusion.scheduler_init_hook(lambda s, *a, **k: None, scheduler)
    probe.calls["x"] += 3
    dispatch = scheduler.request_handlers
    assert dispatch[diffusion.FkProbeDumpReq]([diffusion.FkProbeDumpReq(str(tmp_path / "p"), "t")]) == "done"
    (snap,) = driver.read_probes(str(tmp_path / "p"), "t")
    assert snap["calls"]["x"] == 3
    assert dispatch[diffusion.FkProbeResetReq]([diffusion.FkProbeResetReq()]) == "done" and not probe.calls["x"]


def test_register_without_a_selected_plugin_leaves_sglang_stock(monkeypatch):
    from fk_adapters.engines.sglang import diffusion

    registered, applied = [], []
    _fake_sglang(monkeypatch, registered, applied)
    monkeypatch.delenv("FK_PLUGINS", raising=False)
    monkeypatch.setattr(diffusion, "_loaded_in", None)
    diffusion.register()
    assert registered == [] and applied == []


def test_a_diffusion_worker_selects_an_sdpa_kernel_that_srt_never_takes(make_plugin, monkeypatch, tmp_path):
    """The sdpa slot has no entry in SRT (the catalog's ``not_entered``), but the diffusion runtime's attention is
    one: a worker selects the kernel and hooks both attention implementations; an SRT process still skips it."""
    from fk_adapters import plugins
    from fk_adapters.engines.sglang import diffusion, diffusion_fallback, general_plugin

    registered, applied = [], []
    _fake_sglang(monkeypatch, registered, applied)
    make_plugin("sgldiffattn", """
        from fk_adapters import Kernel, hookimpl
        from fk_adapters.tasks import SLOTS

        @hookimpl
        def fk_kernels(engine, device):  # its own function: SGLang has no native sdpa for a factory to wrap
            return [Kernel(slot="sdpa", fn=SLOTS["sdpa"].reference, cuda_graph_safe=True)]
    """)
    monkeypatch.setenv("FK_PLUGINS", "sgldiffattn")
    monkeypatch.setenv("FK_RUN_DIR", str(tmp_path))
    monkeypatch.setattr(general_plugin, "dump_at_exit", lambda: None)
    monkeypatch.setattr(diffusion, "_loaded_in", None)
    diffusion.register()
    hooked = {t for t, _ in registered}
    assert {f"sglang.multimodal_gen.runtime.layers.attention.backends.{c}.forward"
            for c in ("flash_attn.FlashAttentionImpl", "sdpa.SDPAImpl")} <= hooked
    assert diffusion_fallback.LOAD not in hooked  # diffusers' attention is not transformers' registry: no fallback
    (rec,) = probe.read_loads(str(tmp_path))
    assert rec["installed"]["sdpa"]["plugin"] == "sgldiffattn"
    loaded = plugins.load_plugins(["sgldiffattn"], engine="sglang", device="cuda")
    chosen, notes = plugins.select_kernels(loaded, "sglang", "cuda")
    assert "sdpa" not in chosen and any("sdpa skipped: the slot has no entry in sglang" in n for n in notes)


class _LoraLinear(torch.nn.Linear):
    """A subclass of nn.Linear with its own forward: the transformers host leaves it stock, counted."""


def _diffusers_pipe():
    """A stand-in for the diffusers pipeline SGLang's fallback loads: a denoiser of two linears and a subclass of
    one, and a VAE and text encoder that fk's requests never run."""
    torch.manual_seed(0)
    unet = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8), _LoraLinear(8, 8))
    return NS(unet=unet, vae=torch.nn.Linear(8, 8), text_encoder=torch.nn.Linear(8, 8))


@pytest.mark.parametrize("selected", [True, False])
def test_the_diffusers_fallbacks_denoiser_is_routed_only_with_a_plugin_selected(
        selected, make_plugin, monkeypatch, tmp_path):
    """The fallback serves diffusers' own modules, which no SGLang layer hook reaches: with a gemm kernel selected
    the hook on its pipeline loading routes the denoiser's nn.Linear modules (the transformers host's check), counts
    the rest stock and leaves the other components alone; with none selected nothing is hooked."""
    from fk_adapters.engines.sglang import diffusion, diffusion_fallback
    from tests.engines.sglang import plugin_fakes

    registered, applied, hooks = [], [], {}
    _fake_sglang(monkeypatch, registered, applied, hooks)
    if selected:
        plugin_fakes.select_one_kernel(make_plugin, monkeypatch, tmp_path, "sgldifffb", "gemm")
    else:
        monkeypatch.delenv("FK_PLUGINS", raising=False)
    monkeypatch.setattr(diffusion, "_loaded_in", None)
    diffusion.register()
    pipe = _diffusers_pipe()
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    want = pipe.unet(x)
    stock_load = lambda self, model_path, server_args: pipe  # noqa: E731 - what SGLang's method returns
    load = hooks.get(diffusion_fallback.LOAD)
    assert (load(stock_load, "DiffusersPipeline", "folder", "args") if load else stock_load(0, 0, 0)) is pipe
    torch.testing.assert_close(pipe.unet(x), want)
    routed = [m for m in (*pipe.unet, pipe.vae, pipe.text_encoder) if "forward" in vars(m)]
    if not selected:
        assert load is None and not routed and not probe.constructed and not probe.calls
        return
    assert routed == [pipe.unet[0], pipe.unet[2]]
    assert probe.constructed == {"gemm": 2} and probe.calls == {"sgldifffb:gemm": 2}
    assert any(k.startswith("gemm (_LoraLinear: a subclass of nn.Linear") for k in probe.not_routed)
    (rec,) = probe.read_loads(str(tmp_path))
    assert rec["installed"]["gemm"]["entered"][-1] == diffusion_fallback.WHERE


def test_the_fallback_routes_every_denoiser_and_lists_the_classes_entered():
    from fk_adapters.engines.sglang import diffusion_fallback
    from fk_adapters.kernel import Kernel

    pipe = NS(transformer=torch.nn.Linear(4, 4), transformer_2=torch.nn.LayerNorm(4), unet=None)
    kernel = Kernel(slot="gemm", fn=SLOTS["gemm"].reference, cuda_graph_safe=True)
    entered = diffusion_fallback.route(pipe, {"gemm": ("sgldifffb2", kernel)})
    assert entered == {"gemm": ["transformer: Linear"]} and probe.constructed == {"gemm": 1}
    assert "forward" not in vars(pipe.transformer_2)  # layer_norm was not chosen


class _StandInUNet(torch.nn.Module):
    """SDXL's UNet in miniature: convolutions around a group norm (no slot), a transformer block's LayerNorm and a
    GEGLU projection (diffusers' ``proj`` linear, chunked)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv_in, self.norm = torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.GroupNorm(2, 8)
        self.norm1, self.proj = torch.nn.LayerNorm(8), torch.nn.Linear(8, 16)
        self.conv_out = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        h = self.norm(self.conv_in(x))
        t = h.flatten(2).transpose(1, 2)
        a, gate = self.proj(self.norm1(t)).chunk(2, dim=-1)
        return self.conv_out((t + a * torch.nn.functional.gelu(gate)).transpose(1, 2).reshape(h.shape))


def _register_recording_passthrough(make_plugin, monkeypatch, tmp_path, name: str, slot: str) -> tuple[list, dict]:
    """register() in a fake-sglang diffusion worker with plugin ``name``: a passthrough for ``slot`` that records the
    native its factory is given (``fkplug_<name>.GIVEN``). Returns ([(hooked path, kind)], {path: hook})."""
    from fk_adapters.engines.sglang import diffusion, general_plugin

    registered, applied, hooks = [], [], {}
    _fake_sglang(monkeypatch, registered, applied, hooks)
    make_plugin(name, f"""
        from fk_adapters import Kernel, hookimpl

        GIVEN = []

        def _same(native):
            GIVEN.append(native)
            return native

        @hookimpl
        def fk_kernels(engine, device):
            return [Kernel(slot="{slot}", factory=_same, cuda_graph_safe=True)]
    """)
    monkeypatch.setenv("FK_PLUGINS", name)
    monkeypatch.setenv("FK_RUN_DIR", str(tmp_path))
    monkeypatch.setattr(general_plugin, "dump_at_exit", lambda: None)
    monkeypatch.setattr(diffusion, "_loaded_in", None)
    diffusion.register()
    assert applied == [1]
    return registered, hooks


@pytest.mark.parametrize("slot,modules", [("conv2d", ("conv_in", "conv_out")), ("layer_norm", ("norm1",))])
def test_a_diffusion_worker_selects_a_conv2d_or_layer_norm_kernel_for_the_fallbacks_unet(
        slot, modules, make_plugin, monkeypatch, tmp_path):
    """conv2d and layer_norm have no entry in SGLang's runtimes, but the fallback routes them into diffusers' UNet
    module by module: a diffusion worker selects the kernel (an SRT process still skips it), hooks no SGLang layer
    for it, and the passthrough gets the transformers host's native (torch's op): the UNet's outputs stay bit for bit
    stock while its nn.Conv2d / nn.LayerNorm modules run the plugin's op."""
    import sys

    from fk_adapters import plugins
    from fk_adapters.engines.sglang import diffusion, diffusion_fallback
    from fk_adapters.engines.transformers.natives import NATIVES

    name = f"sgldiff{slot.replace('_', '')}"
    registered, hooks = _register_recording_passthrough(make_plugin, monkeypatch, tmp_path, name, slot)
    assert registered == [(diffusion.SCHEDULER_INIT, "around"), (diffusion_fallback.LOAD, "around")]
    (rec,) = probe.read_loads(str(tmp_path))
    assert rec["installed"][slot] == {"plugin": name, "kernel": rec["installed"][slot]["kernel"],
                                      "entered": [diffusion_fallback.WHERE]}
    pipe = NS(unet=_StandInUNet(), vae=torch.nn.Conv2d(4, 4, 1), text_encoder=torch.nn.LayerNorm(8))
    x = torch.randn(2, 4, 6, 6, generator=torch.Generator().manual_seed(1))
    want = pipe.unet(x)
    assert hooks[diffusion_fallback.LOAD](lambda self, path, args: pipe, "DiffusersPipeline", "folder", "args") is pipe
    # torch's op, never an SGLang native (counted by fk: each call through it is seen, ``loading.kernel_callable``)
    assert {getattr(n, "__wrapped__", n) for n in sys.modules[f"fkplug_{name}"].GIVEN} == {NATIVES[slot]}
    assert torch.equal(pipe.unet(x), want)
    routed = [n for n, m in pipe.unet.named_children() if "forward" in vars(m)]
    assert routed == list(modules) and not any("forward" in vars(m) for m in (pipe.vae, pipe.text_encoder))
    assert probe.constructed == {slot: len(modules)} and probe.calls == {f"{name}:{slot}": len(modules)}
    chosen, notes = plugins.select_kernels(plugins.load_plugins([name], engine="sglang", device="cuda"), "sglang",
                                           "cuda")
    assert slot not in chosen and any(f"{slot} skipped: the slot has no entry in sglang" in n for n in notes)


def test_a_fallback_slot_no_module_of_the_denoiser_takes_is_reported_not_applicable(
        make_plugin, monkeypatch, tmp_path):
    """conv2d chosen for a denoiser without an nn.Conv2d (a DiT of linears): the load record lists where it could
    enter, no layer is built for it, and the evidence calls it n/a, never exercised."""
    from fk_adapters import evidence
    from fk_adapters.engines.sglang import diffusion_fallback
    from fk_adapters.results import SlotEvidence

    _, hooks = _register_recording_passthrough(make_plugin, monkeypatch, tmp_path, "sgldiffdit", "conv2d")
    pipe = NS(transformer=torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 8)))
    hooks[diffusion_fallback.LOAD](lambda self, path, args: pipe, "DiffusersPipeline", "folder", "args")
    pipe.transformer(torch.randn(3, 8))
    ev = evidence.judge({"probe": [probe.snapshot()]}, probe.read_loads(str(tmp_path)), "eager")
    assert ev["slots"]["conv2d"]["entered"] == [diffusion_fallback.WHERE]
    assert ev["slots"]["conv2d"]["layers"] == 0 and ev["slots"]["conv2d"]["status"] == SlotEvidence.NOT_APPLICABLE


def test_a_slot_both_the_runtime_and_the_fallback_host_enters_both(make_plugin, monkeypatch, tmp_path):
    """gemm, which the runtime's linear method and the fallback both host, still enters both, the runtime's first.
    One op per plugin and slot in a process: SGLang's install wraps it first, over SGLang's native."""
    import sys

    from fk_adapters.engines.sglang import diffusion_fallback, natives as sglang_natives

    _, hooks = _register_recording_passthrough(make_plugin, monkeypatch, tmp_path, "sgldiffgemm", "gemm")
    given = sys.modules["fkplug_sgldiffgemm"].GIVEN
    assert {getattr(n, "__wrapped__", n) for n in given} == {sglang_natives.NATIVES["gemm"]}
    (rec,) = probe.read_loads(str(tmp_path))
    entered = rec["installed"]["gemm"]["entered"]
    assert len(entered) == 2 and "UnquantizedLinearMethod" in entered[0] and entered[1] == diffusion_fallback.WHERE
    pipe = NS(unet=_StandInUNet())
    hooks[diffusion_fallback.LOAD](lambda self, path, args: pipe, "DiffusersPipeline", "folder", "args")
    assert "forward" in vars(pipe.unet.proj) and probe.constructed == {"gemm": 1}


@pytest.mark.parametrize("in_fk_driver", [True, False])
def test_the_fallback_hands_back_raw_latents_in_fks_driver_processes_only(monkeypatch, in_fk_driver):
    """SGLang's fallback would rescale a latent to [0, 1], clamp it and turn a kernel's NaN into 0.5; in fk's driver
    and its workers (plugin or not) the latents come back as they are, in float32."""
    import sys
    import types

    import torch

    from fk_adapters.engines.sglang import diffusion_fallback

    def postprocess(self, output):
        return torch.nan_to_num(output.float(), nan=0.5).clamp(0, 1)

    stage = type("DiffusersExecutionStage", (), {"_postprocess_output": postprocess})
    mod = types.ModuleType("sglang.multimodal_gen.runtime.pipelines.diffusers_pipeline")
    mod.DiffusersExecutionStage = stage
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setenv(diffusion_fallback.RAW_LATENTS, "1") if in_fk_driver else monkeypatch.delenv(
        diffusion_fallback.RAW_LATENTS, raising=False)
    diffusion_fallback.keep_raw_latents()
    latent = torch.tensor([-3.0, 0.25, 4.0, float("nan")], dtype=torch.bfloat16)
    out = stage()._postprocess_output(latent)
    if in_fk_driver:
        assert out.dtype == torch.float32 and torch.equal(out[:3], latent[:3].float()) and out[3].isnan()
    else:
        assert out.tolist() == [0.0, 0.25, 1.0, 0.5]
