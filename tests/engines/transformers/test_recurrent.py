"""The linear-attention / SSM slots in transformers models built in this process (tiny, random init): the swapped scan
functions, their stock cases, the agreement check and the natives. Fast, no engine run."""
import importlib

import pytest
import torch

transformers = pytest.importorskip("transformers")

from fk_adapters import probe  # noqa: E402
from fk_adapters.engines.transformers import natives, recurrent  # noqa: E402
from fk_adapters.tasks import SLOTS  # noqa: E402
from tests.engines.transformers.test_install import build, clean_probe  # noqa: E402,F401

MAMBA2 = dict(hidden_size=64, num_hidden_layers=2, num_heads=8, head_dim=16, n_groups=2, state_size=8, expand=2,
              conv_kernel=4, chunk_size=8, vocab_size=256)
QWEN3_NEXT = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, layer_types=["linear_attention",
                  "full_attention"], num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                  linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=32,
                  linear_value_head_dim=32, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32,
                  shared_expert_intermediate_size=32, vocab_size=256)
MODULES = {"Mamba2ForCausalLM": "transformers.models.mamba2.modeling_mamba2",
           "Qwen3NextForCausalLM": "transformers.models.qwen3_next.modeling_qwen3_next"}
FAMILY = {"Mamba2ForCausalLM": ("ssd_chunk_scan", "ssm_state_update"),
          "Qwen3NextForCausalLM": ("gated_delta_rule", "gated_delta_rule_decode")}


@pytest.fixture(autouse=True)
def restore_functions():
    """Each test swaps module globals of transformers: put the originals back."""
    saved = {(m, s.function): getattr(importlib.import_module(m), s.function)
             for m in MODULES.values() for s in recurrent.SWAPS if hasattr(importlib.import_module(m), s.function)}
    yield
    for (m, name), fn in saved.items():
        setattr(importlib.import_module(m), name, fn)


def model(arch):
    cfg = transformers.Mamba2Config(**MAMBA2) if arch.startswith("Mamba2") else transformers.Qwen3NextConfig(
        **QWEN3_NEXT)
    return build(arch, cfg)


def generate(m):
    ids = torch.randint(3, 256, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        out = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                         output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    return out.sequences, torch.stack(out.logits)


def counting(slot, fn):
    def op(*args):
        probe.calls[slot] += 1
        return fn(*args)
    return op


@pytest.mark.parametrize("arch", sorted(MODULES))
def test_the_slots_references_through_the_swap_give_the_models_own_outputs(arch):
    m = model(arch)
    want_ids, want_logits = generate(m)
    entered = recurrent.route(m, {s: counting(s, SLOTS[s].reference) for s in recurrent.SLOTS})
    prefill, decode = FAMILY[arch]
    layers = 2 if arch.startswith("Mamba2") else 1
    assert probe.constructed == {prefill: layers, decode: layers} and not probe.not_routed
    assert entered[prefill] and entered[decode]
    got_ids, got_logits = generate(m)
    assert probe.calls[prefill] == layers and probe.calls[decode] == 3 * layers  # prefill once, then 3 decode steps
    assert torch.equal(got_ids, want_ids)
    torch.testing.assert_close(got_logits, want_logits, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", sorted(MODULES))
def test_a_wrong_kernel_changes_the_outputs(arch):
    """The swap is live: a kernel that drops the scan's output moves the logits (the diff can fail)."""
    m = model(arch)
    _, want = generate(m)

    def zero(slot):
        def op(*args):
            SLOTS[slot].reference(*args)
            args[-1].zero_()
        return op

    recurrent.route(m, {s: zero(s) for s in FAMILY[arch]})
    _, got = generate(m)
    assert (got - want).abs().max() > 1e-2


def test_a_mapping_that_disagrees_with_the_models_function_stays_stock():
    """The agreement check runs the slot's reference through the mapping: were the mapping wrong (here: the value
    heads reversed on the way in), the function is not swapped and every mixer is listed stock, with why."""
    m = model("Qwen3NextForCausalLM")
    module = importlib.import_module(MODULES["Qwen3NextForCausalLM"])
    own = module.torch_chunk_gated_delta_rule
    swap = recurrent.SWAPS[0]
    wrong = recurrent.Swap(swap.function, swap.slot,
                           lambda op, original: lambda q, k, v, *a, **kw: swap.adapt(op, original)(
                               q, k, v.flip(2), *a, **kw), swap.check_args)
    assert not recurrent.agrees(wrong, m.model.layers[0].linear_attn, wrong.adapt(SLOTS[swap.slot].reference, own),
                                own)
    assert recurrent.agrees(swap, m.model.layers[0].linear_attn, swap.adapt(SLOTS[swap.slot].reference, own), own)


def test_a_check_whose_call_went_stock_does_not_agree():
    """Own function against itself proves nothing: a check call the mapping leaves stock fails the check."""
    m = model("Mamba2ForCausalLM")
    module = importlib.import_module(MODULES["Mamba2ForCausalLM"])
    swap = recurrent.SWAPS[3]
    own = module.mamba2_selective_state_update
    contiguous = recurrent.Swap(swap.function, swap.slot, swap.adapt,
                                lambda mixer: (lambda a, k: (a[:2] + tuple(x.contiguous() for x in a[2:4]) + a[4:],
                                                             k))(*swap.check_args(mixer)))
    assert not recurrent.agrees(contiguous, m.backbone.layers[0].mixer,
                                contiguous.adapt(SLOTS[swap.slot].reference, own), own)
    assert not probe.not_routed  # the check's own stock call is not counted


def test_calls_the_slot_cannot_express_stay_stock_with_why():
    module = importlib.import_module(MODULES["Mamba2ForCausalLM"])
    ran = []
    new = recurrent.SWAPS[2].adapt(lambda *a: ran.append(a), module.mamba2_chunk_scan)
    x, dt, a = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2), -torch.rand(2)
    b = c = torch.randn(1, 4, 1, 8)
    new(x, dt, a, b, c, 4, dt_softplus=True, dt_limit=(0.0, 0.1))
    new(x, dt, a, b, c, 4, dt_softplus=True, z=torch.randn(1, 4, 16))
    new(x, dt, a, b, c, 4, dt_softplus=True, seq_idx=torch.zeros(1, 4, dtype=torch.int32))
    new(x, dt, a, b, c, 4, dt_softplus=False)
    assert not ran
    assert sorted(probe.not_routed) == sorted(f"ssd_chunk_scan (call: mamba2_chunk_scan: {why})" for why in (
        "dt clamped to (0.0, 0.1)", "z (gated output)", "tensor arguments ['seq_idx']", "dt_softplus off"))
    new(x, dt, a, b, c, 4, dt_softplus=True, use_cache=True)  # a model's own flag, ignored as the scan ignores it
    assert len(ran) == 1


@pytest.mark.parametrize("name", recurrent.SLOTS)
def test_natives_equal_the_slot_reference(name):
    """transformers' own scans under the slot's interface (what passthrough routes to), on every case of the slot
    that they can express (per-head decay), float32."""
    slot = SLOTS[name]
    ran = 0
    for i, case in enumerate(slot.cases):
        if case.get("per_key_decay"):
            continue
        args = slot.make_inputs(case, torch.float32, "cpu", torch.Generator().manual_seed(i))
        mine = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        natives.NATIVES[name](*mine)
        for pos, want in zip(slot.mutated_positions(), slot.run_reference(args)):
            torch.testing.assert_close(mine[pos], want, atol=2e-4, rtol=1e-3)
        ran += 1
    assert ran >= 2
