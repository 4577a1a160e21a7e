"""Routing slots into transformers models built in this process (tiny, random init): fast, no engine run."""
import importlib.util

import pytest
import torch

transformers = pytest.importorskip("transformers")

from fk_adapters import metrics, ops, probe  # noqa: E402
from fk_adapters.engines.loading import capture_slots  # noqa: E402
from fk_adapters.engines.transformers import attention, inputs, install, natives, recurrent  # noqa: E402
from fk_adapters.kernel import Kernel  # noqa: E402
from fk_adapters.tasks import SLOTS  # noqa: E402

LLAMA = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=32, vocab_size=512)


@pytest.fixture(autouse=True)
def clean_probe():
    for c in (probe.calls, probe.constructed, probe.not_routed, probe.stock_layers):
        c.clear()
    yield
    for c in (probe.calls, probe.constructed, probe.not_routed, probe.stock_layers):
        c.clear()


def build(arch: str, config, seed: int = 0):
    """A tiny model with spread norm weights (like fk's seeded checkpoints), float32, eval."""
    torch.manual_seed(seed)
    model = getattr(transformers, arch)._from_config(config, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1 and p.numel() > 1 and bool((p == p.reshape(-1)[0]).all()):
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def llama(arch="LlamaModel"):
    return build(arch, transformers.LlamaConfig(**LLAMA))


def ids():
    return {"input_ids": torch.randint(3, 512, (2, 12), generator=torch.Generator().manual_seed(1))}


def forward(model, x):
    with torch.inference_mode():
        return model(**x).last_hidden_state.clone()


def ops_for(plugin: str, fns: dict) -> dict:
    return {s: ops.wrap(plugin, SLOTS[s], fn, ("float32", "float16", "bfloat16")) for s, fn in fns.items()}


def test_hosted_slots_are_the_ones_with_natives():
    assert set(capture_slots("transformers")) == set(natives.NATIVES) == {
        "rms_norm", "silu_and_mul", "gelu_and_mul", "gemm", "fused_moe", "gated_delta_rule", "gated_delta_rule_decode",
        "ssd_chunk_scan", "ssm_state_update", "layer_norm", "conv2d", "sdpa", "gated_rms_norm"}


def test_natives_match_the_slot_references():
    """The recurrent scans' natives take only the cases transformers can express: test_recurrent.py has them."""
    for slot, fn in natives.NATIVES.items():
        if slot in recurrent.SLOTS:
            continue
        s = SLOTS[slot]
        for i, case in enumerate(s.cases):
            for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
                args = s.make_inputs(case, dtype, "cpu", torch.Generator().manual_seed(i))
                tol *= 10 if slot == "layer_norm" and dtype == torch.float32 else 1  # Welford over rows near 100
                torch.testing.assert_close(fn(*args), s.run_reference(args)[0], atol=tol, rtol=tol)


def test_llama_norms_and_mlps_are_routed_per_instance_and_passthrough_is_exact():
    model, stock = llama(), llama()
    base = forward(stock, ids())
    by_module = {s: f for s, f in natives.NATIVES.items() if s not in (*recurrent.SLOTS, attention.SLOT)}
    entered = install.route(model, ops_for("tfx_native", by_module))
    assert entered == {"rms_norm": ["LlamaRMSNorm"], "silu_and_mul": ["LlamaMLP (gate/up concatenated)"],
                       "gelu_and_mul": [], "gemm": ["Linear"], "fused_moe": [], "layer_norm": [], "conv2d": [],
                       "gated_rms_norm": []}
    assert probe.constructed == {"rms_norm": 5, "silu_and_mul": 2, "gemm": 14} and not probe.not_routed
    assert "forward" in vars(model.norm) and "forward" not in vars(stock.norm)  # the instance, not the class
    assert torch.equal(forward(model, ids()), base)  # the engine's own math through the op: bit for bit
    # the routed MLP calls its projections as modules: they go through gemm too
    assert probe.calls == {"tfx_native:rms_norm": 5, "tfx_native:silu_and_mul": 2, "tfx_native:gemm": 14}


def test_gated_norms_route_where_their_forward_is_the_slots_and_stay_stock_otherwise():
    """Mamba2's and Zamba2's (per group) gated norms gate before normalizing, as the slot; Qwen3-Next's gates after:
    it stays stock. A call without a gate runs the module's own forward, counted."""
    from transformers.models.mamba2.modeling_mamba2 import MambaRMSNormGated
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRMSNormGated
    from transformers.models.zamba2.modeling_zamba2 import Zamba2RMSNormGated

    model = torch.nn.ModuleList([MambaRMSNormGated(64), Zamba2RMSNormGated(64, 16), Qwen3NextRMSNormGated(64)])
    for m in model:
        m.weight.data = 1 + 0.1 * torch.randn(64, generator=torch.Generator().manual_seed(1))
    x, z = (torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(s)) for s in (2, 3))
    want = [m(x, z) for m in model]
    entered = install.route(model, ops_for("tfx_native", {"gated_rms_norm": natives.gated_rms_norm}))
    assert entered == {"gated_rms_norm": ["MambaRMSNormGated", "Zamba2RMSNormGated"]}
    assert probe.not_routed == {"gated_rms_norm (Qwen3NextRMSNormGated: forward differs from gated_rms_norm "
                                "(e.g. 1 + weight offset, an extra norm or scale))": 1}
    assert all(torch.equal(m(x, z), w) for m, w in zip(model, want))  # transformers' own math through the op
    assert probe.calls == {"tfx_native:gated_rms_norm": 2}
    model[0](x, None)
    assert probe.not_routed["gated_rms_norm (call: MambaRMSNormGated: no gate)"] == 1


def test_only_chosen_slots_are_routed():
    model = llama()
    assert install.route(model, ops_for("tfx_native", {"silu_and_mul": natives.silu_and_mul})) == {
        "silu_and_mul": ["LlamaMLP (gate/up concatenated)"]}
    assert probe.constructed == {"silu_and_mul": 2} and "forward" not in vars(model.norm)


def test_look_alikes_stay_stock_with_the_reason():
    gemma = build("GemmaModel", transformers.GemmaConfig(**LLAMA))
    entered = install.route(gemma, ops_for("tfx_native", dict(natives.NATIVES)))
    assert entered["rms_norm"] == [] and entered["gelu_and_mul"] == ["GemmaMLP (gate/up concatenated)"]
    assert probe.not_routed == {"rms_norm (GemmaRMSNorm: forward differs from rms_norm "
                                "(e.g. 1 + weight offset, an extra norm or scale))": 5}
    probe.not_routed.clear()
    bitnet = build("BitNetForCausalLM", transformers.BitNetConfig(**LLAMA, hidden_act="relu2"))
    entered = install.route(bitnet, ops_for("tfx_native", dict(natives.NATIVES)))
    assert entered["rms_norm"] == ["BitNetRMSNorm"] and probe.constructed["rms_norm"] == 9  # incl. the sub-norms
    assert probe.not_routed == {"silu_and_mul/gelu_and_mul (BitNetMLP: activation ReLUSquaredActivation is "
                                "neither SiLU nor GELU)": 2}
    # Gemma's norms, then BitNet's MLPs
    assert probe.stock_layers == {"rms_norm": 5, "silu_and_mul": 2, "gelu_and_mul": 2}
    probe.not_routed.clear()
    silu_bitnet = build("BitNetForCausalLM", transformers.BitNetConfig(**LLAMA, hidden_act="silu"))
    install.route(silu_bitnet, ops_for("tfx_native", dict(natives.NATIVES)))
    assert probe.not_routed == {"silu_and_mul (BitNetMLP: forward differs from silu_and_mul "
                                "(e.g. 1 + weight offset, an extra norm or scale))": 2}  # its ffn_sub_norm


class NewerRMSNorm(torch.nn.Module):
    """A transformers RMSNorm whose forward takes one more argument than fk knows."""

    def __init__(self):
        super().__init__()
        self.weight, self.variance_epsilon, self.seen = torch.nn.Parameter(torch.rand(8) + 0.5), 1e-6, []

    def forward(self, hidden_states, quant_linear=None):
        self.seen.append((hidden_states, quant_linear))
        return natives.rms_norm(hidden_states, self.weight, self.variance_epsilon)


class NewerMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = (torch.nn.Linear(8, 16), torch.nn.Linear(8, 16),
                                                        torch.nn.Linear(16, 8))
        self.act_fn, self.seen = torch.nn.SiLU(), []

    def forward(self, x, quant_linear=None):
        self.seen.append((x, quant_linear))
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


@pytest.mark.parametrize("extra_args, extra_kwargs, why", [
    ((), {"quant_linear": object()}, "unknown argument 'quant_linear'"),
    ((object(),), {}, "2 positional arguments, knows 1"),
])
def test_an_unseen_argument_reaches_the_modules_own_forward_unchanged(extra_args, extra_kwargs, why):
    holder = torch.nn.Sequential(NewerRMSNorm(), NewerMLP())
    entered = install.route(holder, ops_for("tfx_drift", {"rms_norm": natives.rms_norm,
                                                           "silu_and_mul": natives.silu_and_mul}))
    assert entered == {"rms_norm": ["NewerRMSNorm"], "silu_and_mul": ["NewerMLP (gate/up concatenated)"]}
    x = torch.randn(2, 8)
    for (slot, m), name in zip((("rms_norm", holder[0]), ("silu_and_mul", holder[1])), ("hidden_states", "x")):
        m.seen.clear()
        m(x, *extra_args, **extra_kwargs)
        assert len(m.seen) == 1 and m.seen[0][0] is x
        assert m.seen[0][1] is (extra_args or [extra_kwargs["quant_linear"]])[0]
        (n,) = [n for k, n in probe.not_routed.items() if k.startswith(f"{slot} (call: {type(m).__name__}: {why}")]
        assert n == 1
        m(**{name: x})  # the one input by its own name: routed
        assert len(m.seen) == 1
    assert probe.calls == {"tfx_drift:rms_norm": 1, "tfx_drift:silu_and_mul": 1}  # only the known calls


def test_gelu_flavours_map_to_approximate():
    from torch import nn
    from transformers import activations as A

    assert install._activation(A.GELUActivation()) == ("gelu_and_mul", ("none",))
    assert install._activation(A.GELUTanh()) == ("gelu_and_mul", ("tanh",))
    assert install._activation(A.NewGELUActivation()) == ("gelu_and_mul", ("tanh",))
    assert install._activation(nn.GELU(approximate="tanh")) == ("gelu_and_mul", ("tanh",))
    assert install._activation(nn.SiLU()) == ("silu_and_mul", ())
    assert install._activation(A.QuickGELUActivation()) is None


def test_rms_norm_without_eps_is_not_routed():
    class OddRMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(8))

        def forward(self, x):
            return x * self.weight

    holder = torch.nn.Sequential(OddRMSNorm())
    assert install.route(holder, ops_for("tfx_native", {"rms_norm": natives.rms_norm})) == {"rms_norm": []}
    assert probe.not_routed == {"rms_norm (OddRMSNorm: no eps (variance_epsilon or eps) attribute)": 1}


def test_install_enters_nothing_for_slots_transformers_does_not_host():
    chosen = {s: ("tfx_pass", Kernel(slot=s, factory=lambda native: native, devices=("cpu",))) for s in SLOTS}
    entered = install.install(llama(), chosen)
    assert list(entered) == list(chosen)  # load_and_install zips them with the chosen slots
    assert entered["fused_add_rms_norm"] == entered["rotary_embedding"] == entered["gelu_and_mul"] == []
    assert entered["rms_norm"] == ["LlamaRMSNorm"]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None or importlib.util.find_spec("fk_wrong") is None,
                    reason="needs triton and the fk-wrong plugin")
def test_output_diffs_pass_triton_and_catch_the_wrong_kernel(tmp_path):
    from fk_triton_kernels import kernels
    from fk_wrong import wrong_rms_norm
    from safetensors.torch import save_file

    save_file({"last_hidden_state": forward(llama(), ids())}, str(tmp_path / "base.safetensors"))
    for plugin, fns, passed in (("tfx_triton", {"rms_norm": kernels.rms_norm, "silu_and_mul": kernels.silu_and_mul},
                                 True),
                                ("tfx_wrong", {"rms_norm": wrong_rms_norm}, False)):
        model = llama()
        install.route(model, ops_for(plugin, fns))
        path = str(tmp_path / f"{plugin}.safetensors")
        save_file({"last_hidden_state": forward(model, ids())}, path)
        res = metrics.output_correctness(str(tmp_path / "base.safetensors"), path, "float32")
        assert res["passed"] is passed, res
        assert probe.calls[f"{plugin}:rms_norm"] == 5


def test_seeded_inputs_follow_the_forward_signature():
    vit = build("DINOv3ViTModel", transformers.DINOv3ViTConfig(hidden_size=64, intermediate_size=128,
                                                               num_hidden_layers=1, num_attention_heads=2,
                                                               patch_size=16, image_size=32))
    spec = {"image_size": 32, "channels": 3}
    a, b = inputs.batch(vit, spec, 2, 7, "cpu", torch.float32), inputs.batch(vit, spec, 2, 7, "cpu", torch.float32)
    assert list(a) == ["pixel_values"] and a["pixel_values"].shape == (2, 3, 32, 32)
    assert torch.equal(a["pixel_values"], b["pixel_values"])
    bert = build("XLMRobertaModel", transformers.XLMRobertaConfig(hidden_size=32, intermediate_size=64,
                                                                  num_hidden_layers=1, num_attention_heads=2,
                                                                  vocab_size=100, max_position_embeddings=40))
    x = inputs.batch(bert, {"seq_len": 16}, 3, 0, "cpu", torch.float32)
    assert x["input_ids"].shape == x["attention_mask"].shape == (3, 16) and int(x["input_ids"].max()) < 100
    with pytest.raises(inputs.InputsError, match="inputs for XLMRobertaModel not supported yet"):
        inputs.batch(bert, {"image_size": 32}, 1, 0, "cpu", torch.float32)


def test_transformers_jobs_are_built_from_the_inputs_table():
    from fk_adapters import scenarios

    bitnet = scenarios.load("tiny-bitnet")
    job = scenarios.build_job(bitnet, "/m", "compiled", engine="transformers")
    assert job == scenarios.build_job(bitnet, "/m", "compiled", engine="transformers")  # seeded
    assert (job["engine"], job["mode"], job["architectures"], job["family"]) == (
        "transformers", "eager", ["BitNetForCausalLM"], "llm")
    c = job["correctness"]
    assert [len(p) for p in c["prompts"]] == [16] * 4 and c["max_tokens"] == 8
    assert [len(t) for t in c["teacher"]] == [24] * 2
    assert {k: len(w["prompts"]) for k, w in job["perf"]["throughput"].items()} == {"batch1": 1, "batch4": 4}
    assert list(job["perf"]["latency"]) == ["batch1"] and job["perf"]["repeats"] == 3
    assert scenarios.build_job(bitnet, "/m", "eager", quick=4, engine="transformers")["perf"]["repeats"] == 1
    dino = scenarios.load("tiny-dinov3")
    job = scenarios.build_job(dino, "/m", "eager", engine="transformers")
    assert "correctness" not in job and job["correctness_batch"] == 2 and job["inputs"]["image_size"] == 64
    assert job["perf"] == {"repeats": 3, "warmup": 1, "iters": 8, "batches": [2, 4]}
    assert scenarios.build_job(dino, "/m", "eager", quick=True, engine="transformers")["perf"]["iters"] == 2
    assert scenarios.build_job(dino, "/m", "eager", quick=32, engine="transformers")["perf"]["iters"] == 1


def test_which_scenarios_transformers_runs(tmp_path):
    from fk_adapters import scenarios

    for name in scenarios.builtin_names():
        sc = scenarios.load(name)
        if "transformers" in sc.hosts:
            scenarios.check_runnable(sc, "transformers")
    with pytest.raises(scenarios.ScenarioError, match="not hosted by transformers"):
        scenarios.check_runnable(scenarios.load("tiny-llama"), "transformers")
    with pytest.raises(scenarios.ScenarioError, match="not hosted by vllm"):
        scenarios.check_runnable(scenarios.load("tiny-dinov3"), "vllm")
    text = scenarios._builtin_dir().joinpath("tiny-bitnet.toml").read_text()
    f = tmp_path / "x.toml"
    f.write_text(text.replace("prompt_len = 16\n", ""))
    with pytest.raises(scenarios.ScenarioError, match="nor an \\[inputs\\] table for transformers with prompt_len"):
        scenarios.check_runnable(scenarios.load(str(f)), "transformers")


def test_reference_runs_the_same_weights_one_precision_up_and_leaves_the_model_bit_for_bit(tmp_path, monkeypatch):
    import copy
    import itertools

    from safetensors.torch import load_file

    from fk_adapters.engines.transformers import driver

    vit = build("DINOv3ViTModel", transformers.DINOv3ViTConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, patch_size=16, image_size=32,
        use_gated_mlp=True)).to(torch.bfloat16)
    vit.register_buffer("kept", torch.randn(3, dtype=torch.float64))  # not of the job's dtype: left alone

    def state():
        return dict(itertools.chain(vit.named_parameters(), vit.named_buffers()))

    before = {k: v.clone() for k, v in state().items()}

    def unchanged():
        after = state()
        return set(after) == set(before) and all(after[k].dtype == v.dtype and torch.equal(after[k], v)
                                                 for k, v in before.items())

    monkeypatch.setenv("FK_RUN_DIR", str(tmp_path))
    job = {"dtype": "bfloat16", "inputs": {"image_size": 32, "channels": 3}, "correctness_batch": 2, "seed": 3}
    tf32 = torch.backends.cudnn.allow_tf32
    res = driver._reference(vit, job, "cpu")
    assert unchanged() and torch.backends.cudnn.allow_tf32 == tf32 and "reference_error" not in res
    assert res["reference_file"] == str(tmp_path / "reference.safetensors")
    ref = load_file(res["reference_file"])
    assert {k: v.dtype for k, v in ref.items()} == {"last_hidden_state": torch.float32, "pooler_output": torch.float32}
    x = inputs.batch(vit, job["inputs"], 2, 3, "cpu", torch.bfloat16)  # the float32 forward of the bf16 run's inputs
    with torch.inference_mode():
        want = copy.deepcopy(vit).float()(pixel_values=x["pixel_values"].float())
    assert torch.equal(ref["last_hidden_state"], want.last_hidden_state)
    vit32 = copy.deepcopy(vit).float()  # a float32 job: its reference is the float64 forward, the model left float32
    res = driver._reference(vit32, dict(job, dtype="float32"), "cpu")
    ref = load_file(res["reference_file"])
    assert {v.dtype for v in ref.values()} == {torch.float64}
    assert {p.dtype for p in vit32.parameters()} == {torch.float32}
    x = inputs.batch(vit32, job["inputs"], 2, 3, "cpu", torch.float32)
    with torch.inference_mode():
        want = copy.deepcopy(vit32).double()(pixel_values=x["pixel_values"].double())
    assert torch.equal(ref["last_hidden_state"], want.last_hidden_state)

    def boom(model, x):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(driver, "_outputs", boom)
    res = driver._reference(vit, job, "cpu")  # a failure leaves no reference and the model as it was
    assert res["reference_error"] == "RuntimeError: CUDA out of memory" and "reference_file" not in res and unchanged()


# ----------------------------------------------------------------------------- gemm and fused_moe

MOE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           head_dim=16, vocab_size=128, num_local_experts=4, num_experts_per_tok=2)
MOE_CONFIGS = {"MixtralForCausalLM": lambda: transformers.MixtralConfig(**MOE),
               "GptOssForCausalLM": lambda: transformers.GptOssConfig(
                   **MOE, layer_types=["sliding_attention", "full_attention"], sliding_window=8)}


def moe_model(arch: str, dtype=torch.float32, impl: str = "eager"):
    """A tiny MoE LLM with every parameter seeded (``_from_config`` leaves the 3-D expert weights unset)."""
    torch.manual_seed(0)
    model = getattr(transformers, arch)._from_config(MOE_CONFIGS[arch](), dtype=dtype,
                                                    experts_implementation=impl).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name) * p.numel())))
    return model


def logits(model):
    with torch.inference_mode():
        return model(**ids_moe()).logits.clone()


def ids_moe():
    return {"input_ids": torch.randint(3, 128, (2, 9), generator=torch.Generator().manual_seed(1))}


@pytest.mark.parametrize("arch, entered_as", [("MixtralForCausalLM", "MixtralExperts (silu)"),
                                              ("GptOssForCausalLM", "GptOssExperts (swigluoai, transposed, biases)")])
@pytest.mark.parametrize("dtype, impl", [(torch.float32, "eager"), (torch.bfloat16, "eager"),
                                         (torch.bfloat16, "grouped_mm")])
def test_linears_and_experts_are_routed_and_passthrough_is_exact(arch, entered_as, dtype, impl):
    model, base = moe_model(arch, dtype, impl), logits(moe_model(arch, dtype, impl))
    entered = install.route(model, ops_for("tfx_moe_native", {s: natives.NATIVES[s] for s in ("gemm", "fused_moe")}))
    assert entered == {"gemm": ["Linear"], "fused_moe": [entered_as]} and not probe.not_routed
    assert probe.constructed == {"gemm": 9, "fused_moe": 2}  # q, k, v, o per layer and lm_head; the routers are not
    assert "forward" in vars(model.lm_head) and "forward" in vars(model.model.layers[0].mlp.experts)
    assert torch.equal(logits(model), base)  # the configured experts implementation itself: bit for bit in bf16 too
    assert probe.calls == {"tfx_moe_native:gemm": 9, "tfx_moe_native:fused_moe": 2}


def test_reference_kernels_agree_and_a_routed_module_takes_its_inputs_by_name():
    model, base = moe_model("GptOssForCausalLM"), logits(moe_model("GptOssForCausalLM"))
    install.route(model, ops_for("tfx_moe_ref", {s: SLOTS[s].reference for s in ("gemm", "fused_moe")}))
    torch.testing.assert_close(logits(model), base, atol=1e-5, rtol=1e-5)
    experts = model.model.layers[0].mlp.experts
    x, idx, w = torch.randn(3, 64), torch.tensor([[0, 1], [2, 3], [1, 2]]), torch.full((3, 2), 0.5)
    with torch.inference_mode():
        by_name = experts(hidden_states=x, router_indices=idx, routing_weights=w)
        torch.testing.assert_close(by_name, type(experts).forward(experts, x, idx, w), atol=1e-5, rtol=1e-5)
    assert probe.calls["tfx_moe_ref:fused_moe"] == 3 and not probe.not_routed


def test_experts_whose_forward_is_not_the_mapped_math_stay_stock():
    model = moe_model("MixtralForCausalLM")
    lying, parallel = model.model.layers[0].mlp.experts, model.model.layers[1].mlp.experts
    lying.is_concatenated = False  # the layout flags now say GPT-OSS's interleaved swigluoai: its math is not that
    parallel._is_expert_parallel = True
    entered = install.route(model, ops_for("tfx_moe_native", {"fused_moe": natives.NATIVES["fused_moe"]}))
    assert entered == {"fused_moe": []} and "forward" not in vars(lying)
    assert probe.not_routed == {"fused_moe (MixtralExperts: forward differs from fused_moe (e.g. 1 + weight offset, "
                                "an extra norm or scale))": 1,
                                "fused_moe (MixtralExperts: expert parallel (ids local to this rank))": 1}


def test_only_plain_linears_are_routed_the_subclasses_stay_stock_by_name():
    class Int8Linear(torch.nn.Linear):  # a quantized linear's shape: its own forward
        def forward(self, x):
            return super().forward(x).round()

    holder = torch.nn.Sequential(torch.nn.Linear(8, 16), Int8Linear(16, 4), torch.nn.Linear(4, 2, bias=False))
    entered = install.route(holder, ops_for("tfx_moe_native", {"gemm": natives.gemm}))
    assert entered == {"gemm": ["Linear"]} and probe.constructed == {"gemm": 2}
    assert probe.not_routed == {"gemm (Int8Linear: a subclass of nn.Linear (its own forward, e.g. quantized))": 1}
    x = torch.randn(2, 5, 8)
    with torch.inference_mode():
        assert holder(x).shape == (2, 5, 2)  # leading dims flattened for the op and restored
    assert probe.calls == {"tfx_moe_native:gemm": 2}


def test_fused_moe_native_runs_the_reference_for_weights_no_module_owns():
    model = moe_model("MixtralForCausalLM", torch.bfloat16)
    install.route(model, ops_for("tfx_moe_native", {"fused_moe": natives.NATIVES["fused_moe"]}))
    s = SLOTS["fused_moe"]
    args = s.make_inputs(s.cases[0], torch.bfloat16, "cpu", torch.Generator().manual_seed(0))
    assert torch.equal(natives.fused_moe(*args), s.reference(*args))
    m = model.model.layers[0].mlp.experts
    x, idx, w = torch.randn(3, 64).bfloat16(), torch.tensor([[0, 1], [2, 3], [1, 2]]), torch.full((3, 2), 0.5)
    own = (x, m.gate_up_proj, m.down_proj, w, idx, "silu", False, None, None, 1.702, 7.0, 1.0)
    with torch.inference_mode():
        assert torch.equal(natives.fused_moe(*own), type(m).forward(m, x, idx, w))
        copied = (x, m.gate_up_proj.clone(), *own[2:])
        assert torch.equal(natives.fused_moe(*copied), s.reference(*copied))


def test_experts_without_the_expert_parallel_flag_route():
    """transformers 5.17 (the GPU machine's) sets no ``_is_expert_parallel`` on an experts module: not parallel."""
    from fk_adapters.engines.transformers import experts

    model = moe_model("MixtralForCausalLM")
    m = model.model.layers[0].mlp.experts
    vars(m).pop("_is_expert_parallel", None)
    assert not hasattr(m, "_is_expert_parallel")
    assert isinstance(experts.layout(m, lambda act: ("silu_and_mul", ())), experts.Layout)
