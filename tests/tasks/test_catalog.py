"""The catalog: every slot has a parseable interface, a reference and inputs that exercise it."""
import math

import pytest
import torch

from fk_adapters import op_families
from fk_adapters.engines.sglang.targets import UNCOVERED_SLOTS
from fk_adapters.tasks import SLOTS

EXPECTED = {"rms_norm", "fused_add_rms_norm", "gated_rms_norm", "silu_and_mul", "gelu_and_mul", "rotary_embedding",
            "gemm", "fused_moe", "paged_attention", "layer_norm", "conv2d", "sdpa"}


def test_catalog_has_the_required_slots_with_engine_entries():
    assert EXPECTED <= set(SLOTS)
    for s in SLOTS.values():
        assert s.signature.startswith(s.name + "(") and s.schema and s.cases
        assert set(s.entries) <= {"vllm", "sglang", "transformers"} and all(s.entries.values())
        assert "vllm" in s.entries or "vllm" in s.not_entered  # where it enters vLLM, or why not
        assert not set(s.entries) & set(s.not_entered) and all(s.not_entered.values())
        assert "sglang" in s.entries or s.name in UNCOVERED_SLOTS  # not hooked there yet, with its reason


def test_every_slot_covers_an_op_family():
    """coverage.md's "slots hold X% of device time" counts a family only through the slots mapped to it."""
    covered = {slot for slots in op_families.SLOT_FAMILIES.values() for slot in slots}
    assert covered == set(SLOTS)
    assert op_families.family("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn") == "gemm"
    assert op_families.family("fused_moe_kernel") == "moe"
    assert "gemm" in op_families.SLOT_FAMILIES["gemm"] and "fused_moe" in op_families.SLOT_FAMILIES["moe"]


@pytest.mark.parametrize("name", sorted(SLOTS))
def test_schema_matches_signature(name):
    s = SLOTS[name]
    schema_args = [a.strip().split()[-1] for a in s.schema.split("->")[0].strip("() ").split(",")]
    assert schema_args == s.param_names()
    for m in s.mutates:
        assert f"!) {m}" in s.schema or f"!)? {m}" in s.schema


@pytest.mark.parametrize("name", sorted(SLOTS))
def test_reference_runs_on_every_case_and_fake_matches_shape(name):
    s = SLOTS[name]
    for i, case in enumerate(s.cases):
        args = s.make_inputs(case, torch.float32, "cpu", torch.Generator().manual_seed(i))
        outs = s.run_reference(args)
        assert outs and all(torch.isfinite(o).all() for o in outs)
        if s.fake:
            assert s.fake(*args).shape == outs[0].shape
        if s.in_place:  # the reference must really write in place, and only the declared arguments
            before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            s.reference(*args)
            for pos, (a, b) in enumerate(zip(args, before)):
                if isinstance(a, torch.Tensor) and a is not None:
                    changed = not torch.equal(a, b)
                    assert changed == (pos in s.mutated_positions()), (name, pos)


def test_rms_norm_semantics():
    x = torch.tensor([[3.0, 4.0]])
    w = torch.tensor([1.0, 2.0])
    out = SLOTS["rms_norm"].reference(x, w, 0.0)
    rms = math.sqrt((9 + 16) / 2)
    torch.testing.assert_close(out, torch.tensor([[3 / rms, 8 / rms]]))


def test_fused_add_rms_norm_semantics():
    x, r, w = torch.tensor([[1.0, 2.0]]), torch.tensor([[2.0, 2.0]]), torch.ones(2)
    SLOTS["fused_add_rms_norm"].reference(x, r, w, 0.0)
    torch.testing.assert_close(r, torch.tensor([[3.0, 4.0]]))
    torch.testing.assert_close(x, SLOTS["rms_norm"].reference(torch.tensor([[3.0, 4.0]]), w, 0.0))


def test_gated_activations_semantics():
    x = torch.tensor([[1.0, -2.0, 3.0, 0.5]])
    silu = SLOTS["silu_and_mul"].reference(x)
    torch.testing.assert_close(silu, torch.tensor([[1 / (1 + math.exp(-1)) * 3.0, -2 / (1 + math.exp(2)) * 0.5]]))
    erf = SLOTS["gelu_and_mul"].reference(x, "none")
    tanh = SLOTS["gelu_and_mul"].reference(x, "tanh")

    def gelu(v):
        return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))

    torch.testing.assert_close(erf, torch.tensor([[gelu(1.0) * 3.0, gelu(-2.0) * 0.5]]))
    assert not torch.equal(erf, tanh) and torch.allclose(erf, tanh, atol=1e-2)
    with pytest.raises(ValueError):
        SLOTS["gelu_and_mul"].reference(x, "sigmoid")


@pytest.mark.parametrize("is_neox", [True, False])
def test_rotary_semantics_rotate_pairs_and_keep_the_rest(is_neox):
    head, rot = 8, 4
    q = torch.arange(1.0, 9.0).reshape(1, head)
    k = q.clone()
    cache = torch.tensor([[0.0, 0.0, 1.0, 1.0]])  # position 0: cos 0, sin 1 (a quarter turn)
    SLOTS["rotary_embedding"].reference(torch.tensor([0]), q, k, head, cache, is_neox)
    pairs = [(0, 2), (1, 3)] if is_neox else [(0, 1), (2, 3)]
    orig = torch.arange(1.0, 9.0)
    for a, b in pairs:  # (x1, x2) -> (-x2, x1)
        assert q[0, a] == -orig[b] and q[0, b] == orig[a]
    assert torch.equal(q[0, rot:], orig[rot:]) and torch.equal(q, k)


@pytest.mark.parametrize("name", ["gemm", "fused_moe"])
def test_flops_and_traffic_count_one_call(name):
    s = SLOTS[name]
    for i, case in enumerate(s.cases):
        args = s.make_inputs(case, torch.bfloat16, "cpu", torch.Generator().manual_seed(i))
        x, w = args[0], args[1]
        assert s.traffic(*args) >= 2 * x.numel() * 2  # x read, a result at least x's size written
        if name == "gemm":
            assert s.flops(*args) == 2 * x.shape[0] * x.shape[1] * w.shape[0]
            assert s.traffic(*args) >= w.numel() * 2


def test_gemm_semantics_and_precision():
    x = torch.tensor([[1.0, 2.0, 3.0]])
    w = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 0.5]])
    b = torch.tensor([10.0, -1.0])
    torch.testing.assert_close(SLOTS["gemm"].reference(x, w, None), torch.tensor([[-2.0, 3.0]]))
    torch.testing.assert_close(SLOTS["gemm"].reference(x, w, b), torch.tensor([[8.0, 2.0]]))
    # bfloat16 in, one rounding out: 257 + 1 = 258 exactly; rounding 257 to bfloat16 (256) before the bias gives 256
    ones = torch.ones(1, 257, dtype=torch.bfloat16)
    out = SLOTS["gemm"].reference(ones, ones, torch.ones(1, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16 and float(out) == 258.0
    x64 = torch.tensor([[1.0 + 1e-12]], dtype=torch.float64)
    assert SLOTS["gemm"].reference(x64, torch.ones(1, 1, dtype=torch.float64), None).item() == 1.0 + 1e-12


def _moe_by_hand(x, w13, w2, tw, ids, act, on_input, b13, b2, alpha, limit, scale):
    """The slot's definition, token by token and expert by expert, in float64."""
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            if not 0 <= e < w13.shape[0]:
                continue
            wt = float(tw[t, j])
            h = x[t].double() * (wt if on_input else 1.0)
            g = w13[e].double() @ h + (0.0 if b13 is None else b13[e].double())
            if act == "swigluoai":
                gate, up = g[0::2].clamp(max=limit), g[1::2].clamp(-limit, limit)
                a = (up + 1) * gate / (1 + torch.exp(-alpha * gate))
            else:
                half = g.shape[0] // 2
                gate, up = g[:half], g[half:]
                a = {"silu": gate / (1 + torch.exp(-gate)),
                     "gelu": 0.5 * gate * (1 + torch.erf(gate / 2 ** 0.5)),
                     "gelu_tanh": 0.5 * gate * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (gate + 0.044715 * gate ** 3)))
                     }[act] * up
            o = w2[e].double() @ a + (0.0 if b2 is None else b2[e].double())
            out[t] += o if on_input else wt * o
    return (out * scale).to(x.dtype)


@pytest.mark.parametrize("case", range(len(SLOTS["fused_moe"].cases)))
def test_fused_moe_matches_a_direct_per_token_loop(case):
    s = SLOTS["fused_moe"]
    args = s.make_inputs(s.cases[case], torch.float32, "cpu", torch.Generator().manual_seed(case))
    torch.testing.assert_close(s.reference(*args), _moe_by_hand(*args), atol=1e-5, rtol=1e-5)


def _tiny_moe(activation="silu", **kw):
    """T=2, H=2, I=1, E=2, k=2: small enough to write the result down."""
    x = torch.tensor([[1.0, 2.0], [-1.0, 0.5]])
    w13 = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[0.5, 0.5], [1.0, -1.0]]])  # [E, 2I, H]
    w2 = torch.tensor([[[1.0], [2.0]], [[-1.0], [0.5]]])  # [E, H, I]
    tw = torch.tensor([[0.75, 0.25], [0.6, 0.4]])
    ids = torch.tensor([[0, 1], [1, -1]], dtype=torch.int32)
    args = dict(x=x, w13=w13, w2=w2, topk_weights=tw, topk_ids=ids, activation=activation,
                apply_router_weight_on_input=False, w13_bias=None, w2_bias=None, alpha=1.702, limit=7.0,
                routed_scaling_factor=1.0)
    args.update(kw)
    return args


def test_fused_moe_by_hand_and_ids_outside_the_experts_contribute_nothing():
    ref = SLOTS["fused_moe"].reference
    silu = torch.nn.functional.silu
    out = ref(**_tiny_moe())
    # token 0: expert 0 g = (1, 2), a = silu(1) * 2; expert 1 g = (1.5, -1), a = silu(1.5) * -1
    e0, e1 = float(silu(torch.tensor(1.0))) * 2, float(silu(torch.tensor(1.5))) * -1
    want0 = [0.75 * e0 + 0.25 * -e1, 0.75 * 2 * e0 + 0.25 * 0.5 * e1]
    # token 1: only expert 1 (the -1 is padding): g = (-0.25, -1.5)
    e1b = float(silu(torch.tensor(-0.25))) * -1.5
    torch.testing.assert_close(out, torch.tensor([want0, [0.6 * -e1b, 0.6 * 0.5 * e1b]]))
    for bad in (-1, 2, 1000):  # any id outside [0, E) is skipped, never indexed
        args = _tiny_moe(topk_ids=torch.tensor([[0, bad], [bad, bad]]))
        got = ref(**args)
        torch.testing.assert_close(got[0], torch.tensor([0.75 * e0, 0.75 * 2 * e0]))
        assert torch.equal(got[1], torch.zeros(2))
    scaled = ref(**_tiny_moe(routed_scaling_factor=2.5))
    torch.testing.assert_close(scaled, 2.5 * out)


def test_fused_moe_router_weight_on_input_and_biases():
    ref = SLOTS["fused_moe"].reference
    ids = torch.tensor([[0], [1]])
    tw = torch.tensor([[0.5], [2.0]])
    on_in = ref(**_tiny_moe(topk_ids=ids, topk_weights=tw, apply_router_weight_on_input=True))
    x = torch.tensor([[1.0, 2.0], [-1.0, 0.5]])
    manual = ref(**_tiny_moe(x=x * tw, topk_ids=ids, topk_weights=torch.ones(2, 1)))
    torch.testing.assert_close(on_in, manual)
    assert not torch.allclose(on_in, ref(**_tiny_moe(topk_ids=ids, topk_weights=tw)))  # silu*up is not linear
    b13, b2 = torch.tensor([[1.0, -1.0], [0.0, 0.0]]), torch.tensor([[0.5, 0.25], [0.0, 0.0]])
    got = ref(**_tiny_moe(topk_ids=ids, topk_weights=torch.ones(2, 1), w13_bias=b13, w2_bias=b2))
    a = float(torch.nn.functional.silu(torch.tensor(2.0))) * 1.0  # token 0, expert 0: g = (1 + 1, 2 - 1)
    torch.testing.assert_close(got[0], torch.tensor([a + 0.5, 2 * a + 0.25]))


def test_fused_moe_swigluoai_is_interleaved_clamped_and_alpha_gated():
    ref = SLOTS["fused_moe"].reference
    x = torch.tensor([[1.0, 0.0]])
    w13 = torch.tensor([[[10.0, 0.0], [-9.0, 0.0]]])  # I=1, interleaved: row 0 gate = 10, row 1 up = -9
    w2 = torch.tensor([[[1.0], [0.0]]])
    args = _tiny_moe(x=x, w13=w13, w2=w2, topk_weights=torch.ones(1, 1), topk_ids=torch.zeros(1, 1, dtype=torch.long),
                     activation="swigluoai", alpha=1.5, limit=7.0)
    gate, up = 7.0, -7.0  # gate clamped above only, up both ways
    want = (up + 1) * gate / (1 + math.exp(-1.5 * gate))
    torch.testing.assert_close(ref(**args)[0, 0], torch.tensor(want))
    silu_halves = ref(**dict(args, activation="silu"))  # the same rows read as halves: silu(10) * -9
    torch.testing.assert_close(silu_halves[0, 0], torch.tensor(10 / (1 + math.exp(-10)) * -9))
    tanh, erf = ref(**dict(args, activation="gelu_tanh")), ref(**dict(args, activation="gelu"))
    assert torch.allclose(tanh, erf, rtol=1e-3)
    with pytest.raises(ValueError):
        ref(**dict(args, activation="relu2", topk_ids=torch.full((1, 1), -1)))
