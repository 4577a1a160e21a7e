"""SGLang's linear-attention / SSM entries without SGLang: each hooked call (TritonGDNKernel.extend / packed_decode /
decode, mamba_chunk_scan_combined, selective_state_update) maps to its slot so that the slot's reference gives what
the engine's own kernel would (its semantics rebuilt in ``linear_fakes``), a wrong mapping fails that comparison,
every call outside the slots stays stock with its reason and is counted, and layers are counted once per
constructor."""
from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import torch

from fk_adapters import probe
from fk_adapters.engines import calls
from fk_adapters.engines.sglang import install, linear_attention, targets
from fk_adapters.tasks import SLOTS
from tests.engines.sglang import linear_fakes as fakes


@pytest.fixture(autouse=True)
def _clean():
    def reset():
        for c in (probe.calls, probe.constructed, probe.not_routed, probe.stock_layers, probe.traced):
            c.clear()
        targets.Runtime.mamba_track_why = staticmethod(lambda: "")
        targets.Runtime.gdn_backend_why = staticmethod(lambda phase: "")
        targets.Runtime.ssm_rounding_why = staticmethod(lambda: "")

    reset()
    yield
    reset()


def _target(method):
    return next(t for t in linear_attention.TARGETS if t.method == method)


METHOD = {"gated_delta_rule": "extend", "gated_delta_rule_decode": "packed_decode",
          "ssd_chunk_scan": "mamba_chunk_scan_combined", "ssm_state_update": "selective_state_update"}


def _went_stock(*args, **kwargs):
    pytest.fail("went stock")


def _call(slot, args, gen, method=None):
    method = method or METHOD[slot]
    if method == "extend":
        return fakes.gdn_extend(args)
    if method == "packed_decode":
        return fakes.gdn_packed_decode(args, gen)
    if method == "decode":
        return fakes.gdn_decode(args, gen)
    return fakes.ssd_scan(args) if slot == "ssd_chunk_scan" else fakes.ssm_update(args)


def _engine_run(slot, args, op, gen, method=None):
    """(out, pool) SGLang holds after the hooked call entered the slot op, and (out, state) from the reference."""
    method = method or METHOD[slot]
    c = _call(slot, args, gen, method)
    t = _target(method)
    self_arg = (object(),) if t.bound else ()
    got = c.read(targets.make_hook(t, {slot: op})(_went_stock, *self_arg, *c.args, **c.kwargs))
    state, out = SLOTS[slot].run_reference(c.ref_args)
    return got, (out, state), c.live


def _check(got, expected, live, **tol):
    (out, pool), (e_out, e_state) = got, expected
    torch.testing.assert_close(out.reshape(e_out.shape)[live], e_out[live], **tol)
    torch.testing.assert_close(pool, e_state, **tol)


def _cases(slot):
    """The slot's cases SGLang can make: no per-key decay (KDA has its own kernel), no pads in a prefill."""
    prefill = slot in ("gated_delta_rule", "ssd_chunk_scan")
    return [c for c in SLOTS[slot].cases if not c.get("per_key_decay") and not (prefill and "skip" in c)]


def _args(slot, case, seed=0):
    return SLOTS[slot].make_inputs(case, torch.float32, "cpu", torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("slot", sorted(METHOD))
def test_each_hooked_call_maps_to_its_slot_as_the_engine_computes_it(slot):
    ops = []

    def op(*a):
        ops.append(a)
        SLOTS[slot].reference(*a)

    for i, case in enumerate(_cases(slot)):
        _check(*_engine_run(slot, _args(slot, case, i), op, torch.Generator().manual_seed(i)))
    assert len(ops) == len(_cases(slot)) and not probe.not_routed


def test_the_gdn_decode_path_maps_too_where_it_runs_on_cuda(monkeypatch):
    monkeypatch.setattr(linear_attention, "_device_why", lambda t: "")
    slot = "gated_delta_rule_decode"
    for i, case in enumerate(_cases(slot)):
        _check(*_engine_run(slot, _args(slot, case, i), SLOTS[slot].reference, torch.Generator().manual_seed(i),
                            method="decode"))


def test_packed_decode_splits_and_gates_like_the_kernel_in_bfloat16():
    """bf16 mixed_qkv and gates: beta goes through b's dtype (as the packed kernel and fused_gdn_gating store it);
    a pad row (index -1) keeps the zeros stock writes there."""
    slot = "gated_delta_rule_decode"
    case = next(c for c in _cases(slot) if "skip" in c)
    args, gen = _args(slot, case), torch.Generator().manual_seed(3)
    c = fakes.gdn_packed_decode(args, gen, dtype=torch.bfloat16)
    res = targets.make_hook(_target("packed_decode"), {slot: SLOTS[slot].reference})(
        _went_stock, object(), *c.args, **c.kwargs)
    out, pool = c.read(res)
    e_state, e_out = SLOTS[slot].run_reference(c.ref_args)
    assert res.shape == (1,) + e_out.shape and res.dtype == torch.bfloat16  # stock's [1, R, HV, V]
    torch.testing.assert_close(out[c.live], e_out[c.live].to(torch.bfloat16))
    assert not out[~c.live].any()
    torch.testing.assert_close(pool, e_state)


def test_gates_match_the_kernels_formula():
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, 4, generator=gen).mul(15).bfloat16(), torch.randn(5, 4, generator=gen).bfloat16()
    A_log, dt_bias = torch.randn(4, generator=gen), torch.randn(4, generator=gen)
    for rounded, dtype in ((True, torch.bfloat16), (False, None)):
        g, beta = linear_attention.gdn_gates(A_log, a, b, dt_bias, beta_dtype=dtype)
        eg, ebeta = fakes.kernel_gates(A_log, a, b, dt_bias, round_beta=rounded)
        torch.testing.assert_close(g, eg)
        torch.testing.assert_close(beta, ebeta, rtol=0, atol=0)
        assert g.dtype == beta.dtype == torch.float32


def _wrong(slot, how):
    """The slot's reference with one mapping mistake an adapter could make."""
    ref = SLOTS[slot].reference

    def op(*a):
        a = list(a)
        if how == "pool read K-major":  # [S, HV, K, V] for [S, HV, V, K]
            st = a[5]
            kmaj = st.transpose(-1, -2).contiguous()
            a[5] = kmaj
            ref(*a)
            st.copy_(kmaj.transpose(-1, -2))
            return
        if how == "q and k swapped":
            a[0], a[1] = a[1], a[0]
        elif how == "beta off by 1e-3 (not rounded through b's dtype)":
            a[4] = a[4] + 1e-3
        elif how == "dt_bias dropped":
            a[6] = torch.zeros_like(a[6])
        elif how == "heads read group 0's B, C":
            a[3], a[4] = a[3][:, :1].expand_as(a[3]), a[4][:, :1].expand_as(a[4])
        elif how == "D dropped":
            a[5] = None
        ref(*a)

    return op


@pytest.mark.parametrize("slot, how", [
    ("gated_delta_rule", "pool read K-major"), ("gated_delta_rule", "q and k swapped"),
    ("gated_delta_rule_decode", "pool read K-major"),
    ("gated_delta_rule_decode", "beta off by 1e-3 (not rounded through b's dtype)"),
    ("ssd_chunk_scan", "dt_bias dropped"), ("ssd_chunk_scan", "heads read group 0's B, C"),
    ("ssm_state_update", "D dropped"), ("ssm_state_update", "heads read group 0's B, C"),
])
def test_a_wrong_mapping_fails_the_comparison(slot, how):
    case = _cases(slot)[0]
    with pytest.raises(AssertionError):
        _check(*_engine_run(slot, _args(slot, case), _wrong(slot, how), torch.Generator().manual_seed(0)))


def _recorder():
    seen = []

    def original(*args, **kwargs):
        seen.append((args, kwargs))
        return "stock"

    return original, seen


def _stock_case(slot, method, change):
    args = _args(slot, _cases(slot)[0])
    c = _call(slot, args, torch.Generator().manual_seed(0), method)
    call, kw = list(c.args), dict(c.kwargs)
    change(call, kw)
    return call, kw


def _set(**kw):
    return lambda call, kwargs: kwargs.update(kw)


def _runtime(name, value):
    def change(call, kwargs):
        setattr(targets.Runtime, name, staticmethod(lambda *a: value))

    return change


def _positional(i, value):
    def change(call, kwargs):
        call[i] = value(call[i])

    return change


STOCK = [
    ("gated_delta_rule", "extend", _runtime("mamba_track_why", "mamba radix-cache tracking step"), "tracking"),
    ("gated_delta_rule", "extend", _positional(3, lambda g: g[..., None].expand(-1, -1, -1, 16)), "per-key decay"),
    ("gated_delta_rule", "extend", _positional(0, lambda q: q[0]), "not varlen"),
    ("gated_delta_rule_decode", "packed_decode", _set(replayssm_d=torch.zeros(1), replayssm_k=torch.zeros(1),
                                                      replayssm_g=torch.zeros(1),
                                                      replayssm_write_pos=torch.zeros(1)), "ReplaySSM"),
    ("gated_delta_rule_decode", "packed_decode", _set(num_v_heads=3), "value heads"),
    ("gated_delta_rule_decode", "packed_decode", _positional(0, lambda m: m[:, 1:]), "mixed_qkv width"),
    ("gated_delta_rule_decode", "decode", lambda call, kw: None, "cpu tensors (fk's SGLang entry is CUDA-only)"),
    ("ssd_chunk_scan", "mamba_chunk_scan_combined", _runtime("mamba_track_why", "mamba radix-cache tracking step"),
     "tracking"),
    ("ssd_chunk_scan", "mamba_chunk_scan_combined", _set(z=torch.zeros(1)), "z (gated output)"),
    ("ssd_chunk_scan", "mamba_chunk_scan_combined", _set(dt_limit=(0.0, 5.0)), "dt_limit"),
    ("ssd_chunk_scan", "mamba_chunk_scan_combined", _set(return_final_states=True), "final states"),
    ("ssd_chunk_scan", "mamba_chunk_scan_combined", _set(return_varlen_states=False), "not varlen"),
    ("ssd_chunk_scan", "mamba_chunk_scan_combined", _set(out=None), "no out buffer"),
    ("ssd_chunk_scan", "mamba_chunk_scan_combined", _set(dt_softplus=False), "without softplus"),
    ("ssm_state_update", "selective_state_update", _set(disable_state_update=True), "speculative verify"),
    ("ssm_state_update", "selective_state_update", _set(intermediate_states_buffer=torch.zeros(1)),
     "speculative verify"),
    ("ssm_state_update", "selective_state_update", _set(z=torch.zeros(1)), "z (gated output)"),
    ("ssm_state_update", "selective_state_update", _set(pad_slot_id=0), "pad_slot_id 0"),
    ("ssm_state_update", "selective_state_update", _positional(2, lambda dt: dt.contiguous() + torch.arange(
        dt.shape[-1])), "dt per channel"),
    ("ssm_state_update", "selective_state_update", _positional(3, lambda A: A.contiguous() + torch.rand(A.shape)),
     "A per channel"),
    ("ssm_state_update", "selective_state_update", _runtime("ssm_rounding_why", "stochastic rounding of the SSM cache"),
     "stochastic rounding"),
    ("ssm_state_update", "selective_state_update", _set(surprise=1), "unknown argument 'surprise'"),
]


@pytest.mark.parametrize("slot, method, change, why", STOCK, ids=[f"{m}-{w}" for _, m, _, w in STOCK])
def test_calls_outside_the_slot_stay_stock_with_their_reason(slot, method, change, why):
    call, kw = _stock_case(slot, method, change)
    t = _target(method)
    self_arg = (object(),) if t.bound else ()
    original, seen = _recorder()
    assert targets.make_hook(t, {slot: lambda *a: pytest.fail("routed")})(original, *self_arg, *call, **kw) == "stock"
    assert len(seen) == 1 and seen[0][0] == (*self_arg, *call) and seen[0][1] is not None
    assert set(seen[0][1]) == set(kw)  # SGLang's original gets the call as it was made
    ((key, n),) = probe.not_routed.items()
    assert key.startswith(f"{slot} (call: ") and why in key and n == 1


def test_speculative_verify_is_hooked_only_to_be_counted_stock():
    x = torch.zeros(1)
    kw = dict(ssm_states=x, cache_indices=x, query_start_loc=x, intermediate_states_buffer=x,
              intermediate_state_indices=x, cache_steps=2, retrieve_parent_token=None)
    original, seen = _recorder()
    hook = targets.make_hook(_target("target_verify"), {"gated_delta_rule_decode": lambda *a: pytest.fail("routed")})
    assert hook(original, object(), *(x,) * 7, **kw) == "stock" and len(seen) == 1
    assert probe.not_routed == {
        "gated_delta_rule_decode (call: speculative verify (a state per draft token, no state update))": 1}


@pytest.mark.parametrize("slot", sorted(METHOD))
def test_the_engines_own_kernel_leaves_each_call_on_stocks_path_counted(slot, monkeypatch):
    """The passthrough: through the slot the adapter would split, gate and pool around the native what the engine's
    fused kernel does inside (vLLM's GDN decode so: 6% slower, session 55)."""
    from fk_adapters.engines import loading

    monkeypatch.setitem(loading.ENGINE_OWN, slot, f"passthrough:{slot}")
    monkeypatch.setattr(probe, "native_path", probe.native_path.__class__())
    c = _call(slot, _args(slot, _cases(slot)[0]), torch.Generator().manual_seed(0))
    t = _target(METHOD[slot])
    original, seen = _recorder()
    hook = targets.make_hook(t, {slot: lambda *a: pytest.fail("routed")})
    assert hook(original, *((object(),) if t.bound else ()), *c.args, **c.kwargs) == "stock" and len(seen) == 1
    assert probe.native_path == {f"passthrough:{slot}": 1} and not probe.not_routed and not probe.calls


def test_an_unselected_slot_runs_stock_uncounted():
    slot = "ssd_chunk_scan"
    c = _call(slot, _args(slot, _cases(slot)[0]), None)
    original, seen = _recorder()
    hook = targets.make_hook(_target("mamba_chunk_scan_combined"), {"ssm_state_update": lambda *a: None})
    assert hook(original, *c.args, **c.kwargs) == "stock" and len(seen) == 1 and not probe.not_routed


def test_gdn_layers_count_per_phase_and_kda_layers_stay_stock():
    """One constructor hook (RadixLinearAttention.__init__) counts both GDN slots, each with its own reasons."""
    extend, packed = _target("extend"), _target("packed_decode")
    counters = [targets.make_layer_counter(extend, ("gated_delta_rule",), lambda: None),
                targets.make_layer_counter(packed, ("gated_delta_rule_decode",), lambda: None)]
    hook = targets.make_counting_hook(counters)

    def init(layer, **kw):
        layer.__dict__.update(kw)

    hook(init, NS(), **vars(fakes.gdn_layer()))
    hook(init, NS(), **vars(fakes.kda_layer()))
    targets.Runtime.gdn_backend_why = staticmethod(
        lambda phase: "GDN decode backend flashinfer (fk hooks the Triton kernel)" if phase == "decode" else "")
    hook(init, NS(), **vars(fakes.gdn_layer()))
    assert probe.constructed == {"gated_delta_rule": 2, "gated_delta_rule_decode": 1}
    assert probe.stock_layers == {"gated_delta_rule": 1, "gated_delta_rule_decode": 2}
    assert any("KDA" in k for k in probe.not_routed) and any("flashinfer" in k for k in probe.not_routed)


def test_install_registers_one_constructor_hook_per_layer_class(monkeypatch):
    registered = []
    hooks = NS(HookType=NS(AROUND="around"),
               HookRegistry=NS(register=lambda path, hook, kind: registered.append((path, hook))))
    counters: dict = {}
    for t in linear_attention.TARGETS:
        mine = {s: object() for s in t.slots}
        install._register(hooks, t, mine, counters)
    paths = [p for p, _ in registered]
    assert paths.count("sglang.srt.layers.radix_linear_attention.RadixLinearAttention.__init__") == 1
    assert paths.count("sglang.srt.layers.attention.mamba.mamba.MambaMixer2.__init__") == 1
    assert "sglang.srt.layers.attention.mamba.ops.ssd_combined.mamba_chunk_scan_combined" in paths
    assert "sglang.srt.layers.attention.mamba.ops.ssu_dispatch.selective_state_update" in paths
    init = dict(registered)["sglang.srt.layers.attention.mamba.mamba.MambaMixer2.__init__"]
    init(lambda layer: None, NS())
    assert probe.constructed == {"ssd_chunk_scan": 1, "ssm_state_update": 1}


def test_a_module_functions_signature_is_read_whole():
    """A hooked module function has no self: the drift check must not drop its first parameter."""
    import types

    mod = types.ModuleType("ssu_dispatch")

    def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                               state_batch_indices=None, pad_slot_id=-1, out=None, disable_state_update=False,
                               intermediate_states_buffer=None, cache_steps=None, retrieve_parent_token=None,
                               intermediate_state_indices=None, new_flag=False):
        pass

    mod.selective_state_update = selective_state_update
    t = _target("selective_state_update")
    assert t.params.names[0] == "state"
    assert calls.drift(t.params, mod, (t.method,)) == (
        "", "in-tree ssu_dispatch also takes 'new_flag': calls passing it stay stock")


def test_the_catalog_names_the_sglang_entries():
    for slot in METHOD:
        (entry,) = SLOTS[slot].entries["sglang"]
        assert METHOD[slot] in entry
        assert "sglang" not in SLOTS[slot].not_entered
