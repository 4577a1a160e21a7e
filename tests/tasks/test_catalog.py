"""The catalog: every slot has a parseable interface, a reference and inputs that exercise it."""
import math

import pytest
import torch

from fk_adapters.tasks import SLOTS

EXPECTED = {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul", "rotary_embedding"}


def test_catalog_has_the_required_slots_with_engine_entries():
    assert EXPECTED <= set(SLOTS)
    for s in SLOTS.values():
        assert s.signature.startswith(s.name + "(") and s.schema and s.cases
        assert {"vllm", "sglang"} <= set(s.entries) <= {"vllm", "sglang", "transformers"} and all(s.entries.values())


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
