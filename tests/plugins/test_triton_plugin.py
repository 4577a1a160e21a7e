"""The example Triton plugin (plugins/fk-triton): every catalog case against the reference.

Without a GPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, float32 only); the
variable has to be set before the kernels module is imported, so it is set here at the top.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

triton = pytest.importorskip("triton")

from _cuda_graph import capture_and_replay, clone_args  # noqa: E402

from fk_adapters.tasks import SLOTS  # noqa: E402

_PLUGIN_SRC = Path(__file__).resolve().parents[2] / "plugins" / "fk-triton"
if importlib.util.find_spec("fk_triton_kernels") is None:  # not installed: use the source tree
    sys.path.insert(0, str(_PLUGIN_SRC))

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {"atol": 1e-5, "rtol": 1e-5}
SLOT_NAMES = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul", "rotary_embedding")  # also on a CPU
# declared for CUDA only, but small enough to test here with the others: their cases run under the interpreter too
SMALL = (*SLOT_NAMES, "gated_rms_norm")
# declared for CUDA only; their kernels are tested under the interpreter in test_triton_gemm_moe.py,
# test_triton_attention.py, test_triton_linear_attention.py and test_triton_vision.py
RECURRENT = ("gated_delta_rule", "gated_delta_rule_decode", "ssd_chunk_scan", "ssm_state_update")
GPU_ONLY = ("gemm", "fused_moe", "paged_attention", *RECURRENT, "gated_rms_norm", "layer_norm", "conv2d", "sdpa")

if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)


def _kernels():
    from fk_triton_kernels import kernels

    return kernels


def _run_both(slot, fn, args):
    """Run kernel and reference on separate clones; return (kernel result, reference result).

    A result is the return value followed by every tensor argument as it is after the call, so
    in-place writes are compared and so is the guarantee that nothing else was written.
    """
    mine, ref = clone_args(args), clone_args(args)
    got = fn(*mine)
    want = slot.reference(*ref)
    if slot.in_place:
        assert got is None, f"{slot.name} is in place and must return None"

    def pick(out, a):
        return ((out,) if out is not None else ()) + tuple(t for t in a if isinstance(t, torch.Tensor))

    return pick(got, mine), pick(want, ref)


def _assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, **TOL)


CASES = [(name, i) for name in SMALL for i in range(len(SLOTS[name].cases))]


@pytest.mark.parametrize("name,index", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_catalog_case_matches_reference(name, index):
    slot = SLOTS[name]
    args = slot.make_inputs(slot.cases[index], torch.float32, DEVICE, torch.Generator().manual_seed(index))
    got, want = _run_both(slot, getattr(_kernels(), name), args)
    _assert_same(got, want)


def test_perturbed_output_fails_the_comparison():
    slot = SLOTS["rms_norm"]
    args = slot.make_inputs(slot.cases[1], torch.float32, DEVICE, torch.Generator().manual_seed(0))
    got, want = _run_both(slot, _kernels().rms_norm, args)
    _assert_same(got, want)
    bad = got[0].clone()
    bad[3, 17] += 1e-3
    with pytest.raises(AssertionError):
        _assert_same((bad,) + got[1:], want)


def test_rotary_styles_are_told_apart():
    """A kernel applying the wrong pairing (gptj for neox) must not pass the comparison."""
    slot = SLOTS["rotary_embedding"]
    case = dict(slot.cases[0], is_neox=True)
    args = slot.make_inputs(case, torch.float32, DEVICE, torch.Generator().manual_seed(1))
    wrong = list(args)
    wrong[5] = False
    got, _ = _run_both(slot, _kernels().rotary_embedding, tuple(wrong))
    _, want = _run_both(slot, _kernels().rotary_embedding, args)
    with pytest.raises(AssertionError):
        _assert_same(got, want)


# ----------------------------------------------------------------------------- layouts

def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=_gen(seed)).to(DEVICE)


@pytest.mark.parametrize("hidden", [200, 256])
def test_rms_norm_strided_rows_and_leading_dims(hidden):
    k = _kernels()
    w = 1.0 + 0.1 * _randn(hidden, seed=1)
    wide = _randn(5, 3 * hidden, seed=2)
    x = wide[:, hidden:2 * hidden]  # a column slice: rows strided by 3*hidden
    before = wide.clone()
    _assert_same((k.rms_norm(x, w, 1e-6),), (SLOTS["rms_norm"].reference(x.clone(), w, 1e-6),))
    assert torch.equal(wide, before)
    x3 = _randn(2, 3, hidden, seed=3)
    _assert_same((k.rms_norm(x3, w, 1e-6),), (SLOTS["rms_norm"].reference(x3, w, 1e-6),))
    xt = _randn(hidden, 4, seed=4).t()  # last dim not contiguous: goes through a copy
    _assert_same((k.rms_norm(xt, w, 1e-6),), (SLOTS["rms_norm"].reference(xt, w, 1e-6),))


def test_fused_add_rms_norm_writes_through_strides():
    k, hidden = _kernels(), 200
    w = 1.0 + 0.1 * _randn(hidden, seed=1)
    wide_x, wide_r = _randn(6, 2 * hidden + 3, seed=2), _randn(6, hidden + 5, seed=3)
    x, r = wide_x[:, hidden:2 * hidden], wide_r[:, 5:]
    ref_x, ref_r = x.clone(), r.clone()
    SLOTS["fused_add_rms_norm"].reference(ref_x, ref_r, w, 1e-6)
    untouched_x, untouched_r = wide_x[:, :hidden].clone(), wide_r[:, :5].clone()
    untouched_tail = wide_x[:, 2 * hidden:].clone()
    assert k.fused_add_rms_norm(x, r, w, 1e-6) is None
    _assert_same((x, r), (ref_x, ref_r))
    assert torch.equal(wide_x[:, :hidden], untouched_x) and torch.equal(wide_x[:, 2 * hidden:], untouched_tail)
    assert torch.equal(wide_r[:, :5], untouched_r)


@pytest.mark.parametrize("name,extra", [("silu_and_mul", ()), ("gelu_and_mul", ("none",)),
                                        ("gelu_and_mul", ("tanh",))])
def test_gated_activations_strided_and_multi_block(name, extra):
    k, d = _kernels(), 1500  # d > 1024: several column blocks per row, last one masked
    wide = 2.0 * _randn(4, 2 * d + 7, seed=5)
    x = wide[:, 7:]
    _assert_same((getattr(k, name)(x, *extra),), (SLOTS[name].reference(x.clone(), *extra),))
    x3 = 2.0 * _randn(2, 3, 2 * 96, seed=6)
    out = getattr(k, name)(x3, *extra)
    assert out.shape == (2, 3, 96)
    _assert_same((out,), (SLOTS[name].reference(x3, *extra),))


def _rope_cache(rot, max_pos=64):
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(DEVICE)


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("rot", [64, 24])
def test_rotary_on_slices_of_qkv(is_neox, rot):
    """query and key are column slices of a fused qkv tensor; v and the non-rotary channels stay put."""
    k, tokens, hq, hk, d = _kernels(), 7, 4, 2, 64
    cache = _rope_cache(rot)
    positions = torch.randint(0, 64, (tokens,), generator=_gen(7), dtype=torch.int64).to(DEVICE)
    qkv = _randn(tokens, (hq + 2 * hk) * d, seed=8)
    q, key = qkv[:, :hq * d], qkv[:, hq * d:(hq + hk) * d]
    ref_q, ref_k = q.clone(), key.clone()
    SLOTS["rotary_embedding"].reference(positions, ref_q, ref_k, d, cache, is_neox)
    before = qkv.clone()
    assert k.rotary_embedding(positions, q, key, d, cache, is_neox) is None
    _assert_same((q, key), (ref_q, ref_k))
    v = slice((hq + hk) * d, None)
    assert torch.equal(qkv[:, v], before[:, v])
    heads = qkv[:, :(hq + hk) * d].reshape(tokens, hq + hk, d)
    assert torch.equal(heads[..., rot:], before[:, :(hq + hk) * d].reshape(tokens, hq + hk, d)[..., rot:])
    assert not torch.equal(heads[..., :rot], before[:, :(hq + hk) * d].reshape(tokens, hq + hk, d)[..., :rot])


def _yarn_cache(rot, base, factor, orig_max, beta_fast=32.0, beta_slow=1.0):
    """vLLM's YaRNScalingRotaryEmbedding cache (truncate=False), mscale folded into cos and sin."""
    import math

    def corr(n_rot):
        return rot * math.log(orig_max / (n_rot * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(corr(beta_fast), 0), min(corr(beta_slow), rot - 1)
    pos_freqs = base ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot)
    ramp = ((torch.arange(rot // 2, dtype=torch.float32) - low) / (high - low if high > low else 0.001)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (high frequencies), 0: interpolate
    inv_freq = (1 / (factor * pos_freqs)) * (1 - keep) + (1 / pos_freqs) * keep
    freqs = torch.outer(torch.arange(int(orig_max * factor), dtype=torch.float32), inv_freq)
    mscale = 0.1 * math.log(factor) + 1.0
    return torch.cat((freqs.cos() * mscale, freqs.sin() * mscale), dim=-1).to(DEVICE)


def test_rotary_gpt_oss_yarn_on_qkv_slices():
    """GPT-OSS (fk46-gpt-oss): YaRN cache (factor 32, mscale 1.35, 131072 rows), neox, 64 q / 8 kv heads of 64
    sliced out of one qkv row of 5120; positions anywhere in the cache. v must stay untouched."""
    k, tokens, hq, hk, d = _kernels(), 9, 64, 8, 64
    cache = _yarn_cache(d, 150000.0, 32.0, 4096)
    assert cache.shape == (131072, d) and abs(cache[0, 0].item() - 1.3465736) < 1e-6
    positions = torch.cat((torch.tensor([0, 1, 4095, 131071]),
                           torch.randint(0, 131072, (tokens - 4,), generator=_gen(12)))).to(DEVICE)
    qkv = _randn(tokens, (hq + 2 * hk) * d, seed=13)
    q, key = qkv[:, :hq * d], qkv[:, hq * d:(hq + hk) * d]
    ref_q, ref_k, v_before = q.clone(), key.clone(), qkv[:, (hq + hk) * d:].clone()
    SLOTS["rotary_embedding"].reference(positions, ref_q, ref_k, d, cache, True)
    assert k.rotary_embedding(positions, q, key, d, cache, True) is None
    _assert_same((q, key), (ref_q, ref_k))
    assert torch.equal(qkv[:, (hq + hk) * d:], v_before)


def test_rotary_without_key_and_3d_query():
    k, tokens, heads, d = _kernels(), 5, 3, 32
    cache = _rope_cache(d)
    positions = torch.randint(0, 64, (tokens,), generator=_gen(9), dtype=torch.int64).to(DEVICE)
    q = _randn(tokens, heads * d, seed=10)
    ref_q = q.clone()
    SLOTS["rotary_embedding"].reference(positions, ref_q, None, d, cache, True)
    k.rotary_embedding(positions, q, None, d, cache, True)
    _assert_same((q,), (ref_q,))
    q3 = _randn(tokens, heads, d, seed=11)  # [T, H, D] layout, written in place
    ref3 = q3.clone()
    SLOTS["rotary_embedding"].reference(positions, ref3.view(tokens, -1), None, d, cache, False)
    k.rotary_embedding(positions, q3, None, d, cache, False)
    _assert_same((q3,), (ref3,))


# ----------------------------------------------------------------------------- declarations

def _module_of(slot):
    from fk_triton_kernels import plugin

    return importlib.import_module(f"fk_triton_kernels.{plugin.SLOT_KERNELS[slot][0]}")


def test_fk_kernels_declares_all_slots_with_real_kernel_names():
    from fk_triton_kernels import plugin

    declared = plugin.fk_kernels(engine="vllm", device=DEVICE)
    assert sorted(k.slot for k in declared) == sorted(SLOT_NAMES + GPU_ONLY)
    for kern in declared:
        kern.validate(SLOTS)
        module = _module_of(kern.slot)
        assert kern.fn is getattr(module, kern.slot)
        assert kern.cuda_graph_safe and kern.compile_safe
        assert kern.engines == ("vllm", "sglang", "transformers") and kern.dtypes == ("float32", "float16", "bfloat16")
        assert (DEVICE in kern.devices) == (DEVICE == "cuda" or kern.slot not in GPU_ONLY)
        assert kern.kernel_names and len(kern.kernel_names) == (2 if kern.slot == "fused_moe" else 1)
        for kname in kern.kernel_names:
            jitted = getattr(module, kname)
            while type(jitted).__name__ not in ("JITFunction", "InterpretedFunction"):  # through @triton.autotune
                jitted = jitted.fn
            assert kname.startswith("fk_triton_") and jitted.fn.__name__ == kname


def test_declared_names_are_the_plugins_own_triton_functions():
    """fk's proof of run accepts each declared name: a @triton.jit function of the plugin's files, one slot each."""
    from importlib.metadata import PackageNotFoundError, distribution

    from fk_triton_kernels import plugin

    from fk_adapters import kernel_names

    try:
        dist = distribution("fk-triton-kernels")
    except PackageNotFoundError:
        dist = None
    names = {k.slot: list(k.kernel_names) for k in plugin.fk_kernels(engine="vllm", device=DEVICE)}
    found = {s: kernel_names.defined("fk_triton_kernels", dist, n) for s, n in names.items()}
    assert found == names
    assert kernel_names.unproven(names, found, set()) == {}


def test_devices_follow_triton_interpret(monkeypatch):
    """Interpreted, the element-wise kernels also serve a CPU run; gemm and fused_moe never do (every linear layer
    through the interpreter would take far too long)."""
    from fk_triton_kernels import plugin

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert {k.devices for k in plugin.fk_kernels(engine="none", device="cuda")} == {("cuda",)}
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    devices = {k.slot: k.devices for k in plugin.fk_kernels(engine="none", device="cpu")}
    assert devices == {**dict.fromkeys(SLOT_NAMES, ("cuda", "cpu")), **dict.fromkeys(GPU_ONLY, ("cuda",))}


def test_hooks_through_pluggy():
    import pluggy
    from fk_triton_kernels import plugin

    from fk_adapters import hookspec

    pm = pluggy.PluginManager(hookspec.PROJECT)
    pm.add_hookspecs(hookspec)
    pm.register(plugin)
    assert pm.hook.fk_plugin_info() == [{"backend": "triton", "triton": triton.__version__}]
    (declared,) = pm.hook.fk_kernels(engine="sglang", device=DEVICE)
    assert len(declared) == len(SLOT_NAMES + GPU_ONLY)


def test_entry_point_when_installed():
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution("fk-triton-kernels")
    except PackageNotFoundError:
        pytest.skip("fk-triton-kernels is not installed (tested from the source tree)")
    eps = [ep for ep in dist.entry_points if ep.group == "fk_adapters"]
    assert [(ep.name, ep.value) for ep in eps] == [("triton", "fk_triton_kernels.plugin")]


# ----------------------------------------------------------------------------- GPU only

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
LOW_TOL = {torch.float16: {"atol": 2e-3, "rtol": 2e-3}, torch.bfloat16: {"atol": 1.6e-2, "rtol": 1.6e-2}}


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name,index", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_low_precision_on_gpu(name, index, dtype):
    """Half precision: within about one rounding step of the reference (both round float32 math once)."""
    slot = SLOTS[name]
    args = slot.make_inputs(slot.cases[index], dtype, "cuda", torch.Generator().manual_seed(index))
    got, want = _run_both(slot, getattr(_kernels(), name), args)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, **LOW_TOL[dtype])


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("name", SMALL)
def test_cuda_graph_capture_and_replay(name):
    """Captured once, replayed on new data: the graph must give the reference answer for that data."""
    slot = SLOTS[name]
    _, got, want = capture_and_replay(slot, getattr(_kernels(), name), slot.cases[-1])
    _assert_same(got, want)


@pytest.mark.gpu
@gpu
def test_profiler_shows_declared_kernel_names():
    from fk_triton_kernels import plugin
    from torch.profiler import ProfilerActivity, profile

    for kern in plugin.fk_kernels(engine="vllm", device="cuda"):
        slot = SLOTS[kern.slot]
        args = slot.make_inputs(slot.cases[0], torch.float32, "cuda", torch.Generator().manual_seed(0))
        kern.fn(*clone_args(args))  # compile (and autotune) outside the profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            kern.fn(*clone_args(args))
            torch.cuda.synchronize()
        names = {e.name for e in prof.events()}
        for kname in kern.kernel_names:
            assert any(kname in n for n in names), (kern.slot, kname, sorted(names))
