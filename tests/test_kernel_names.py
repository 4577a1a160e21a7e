import textwrap

import pytest

from fk_adapters import evidence, kernel_names
from fk_adapters.results.verdict import scenario as _verdict

CXX = ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
       "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8, true>(c10::BFloat16*, long, c10::BFloat16*, float, int)")


@pytest.mark.parametrize("kernel, name", [
    ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 2, true>(c10::BFloat16*, long)", "vllm::rms_norm_kernel"),
    (CXX, "vllm::fused_add_rms_norm_kernel"),
    ("fk_triton_rms_norm_kernel", "fk_triton_rms_norm_kernel"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float)",
     "at::native::vectorized_elementwise_kernel"),
])
def test_the_qualified_name_of_a_profiled_kernel(kernel, name):
    assert kernel_names.qualified(kernel) == name


def test_names_match_exactly_and_never_across_slots():
    assert kernel_names.matches("rms_norm_kernel", "void vllm::rms_norm_kernel<float, 8>(float*)")
    assert kernel_names.matches("vllm::rms_norm_kernel", "void vllm::rms_norm_kernel<float, 8>(float*)")
    assert not kernel_names.matches("rms_norm_kernel", CXX)  # the substring rule counted fused_add's launches
    assert not kernel_names.matches("my_kernel", "my_kernel_2")
    profile = [{"kernels": {CXX: 36, "fk_rms": 4}}]
    assert kernel_names.hits(profile, ["rms_norm_kernel"]) == 0 and kernel_names.hits(profile, ["fk_rms"]) == 4


def test_a_plugin_defines_its_triton_functions_and_library_symbols_only(tmp_path, monkeypatch):
    pkg = tmp_path / "fakeplug"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import triton
        from triton import jit

        @triton.jit
        def mine_kernel(x):
            pass

        @jit
        def other_kernel(x):
            pass

        def rms_norm_kernel(x):  # a plain function of that name is no device kernel
            pass
    """))
    (pkg / "_C.so").write_bytes(b"\x7fELF\0_ZN2fk14my_cuda_kernelIfEEvPT_\0extern_c_kernel\0")
    monkeypatch.syspath_prepend(str(tmp_path))
    names = ["mine_kernel", "other_kernel", "rms_norm_kernel", "my_cuda_kernel", "fk::my_cuda_kernel",
             "extern_c_kernel", "cuda_kernel"]
    assert kernel_names.defined("fakeplug", None, names) == [
        "mine_kernel", "other_kernel", "my_cuda_kernel", "fk::my_cuda_kernel", "extern_c_kernel"]


def test_installed_plugins_record_what_they_define():
    from fk_adapters.plugins import load_plugins

    (triton,) = load_plugins(["triton"], engine="none")
    if triton.error:
        pytest.skip(f"the triton plugin does not load here: {triton.error}")
    for k in triton.describe()["kernels"]:
        assert k["kernel_names_defined"] == k["kernel_names"] != []
    (borrow,) = load_plugins(["borrow"], engine="none")
    assert all(k["kernel_names"] and k["kernel_names_defined"] == [] for k in borrow.describe()["kernels"])


def _load(names, defined, slots=("rms_norm", "silu_and_mul")):
    return {"pid": 10, "role": "worker",
            "installed": {s: {"plugin": "p", "kernel": f"k_{s}", "entered": ["X"]} for s in slots},
            "plugins": [{"name": "p", "kernels": [{"slot": s, "kernel_names": names.get(s, []),
                                                   "kernel_names_defined": defined.get(s, [])} for s in slots]}]}


def _judge(load, mode="compiled", profile=None, native=frozenset()):
    result = {"probe": [{"pid": 10, "calls": {"p:rms_norm": 9, "p:silu_and_mul": 9}, "traced": {},
                         "constructed": {"rms_norm": 4, "silu_and_mul": 2}}], "profile": profile}
    return evidence.judge(result, [load], mode, native)


def _row(ev):
    return {"evidence": ev, "correctness": {"passed": True}, "failures": []}


def test_a_borrowed_name_is_not_proven_and_fails_even_with_allow_unexercised():
    """The engine's own kernel names, declared by a plugin that routes every slot to the engine (as fk-borrow)."""
    load = _load({"rms_norm": ["rms_norm_kernel"], "silu_and_mul": ["act_and_mul_kernel"]}, {})
    profile = [{"kernels": {"void vllm::rms_norm_kernel<float, 8>(float*)": 16,
                            "void vllm::act_and_mul_kernel<float>(float*)": 8}}]
    for mode in ("eager", "graphs", "compiled"):
        ev = _judge(load, mode, profile)
        assert {e["status"] for e in ev["slots"].values()} == {"not proven"}, mode
        assert "not defined by the plugin" in ev["slots"]["rms_norm"]["proof"]
        assert ev["slots"]["rms_norm"]["profiler_hits"] == 0
        status, why = _verdict(_row(ev), [load], allow_unexercised=True)
        assert status == "NOT_PROVEN" and "rms_norm_kernel" in why[0]


def test_a_name_the_stock_engine_launches_is_not_proven_even_when_the_plugin_defines_it():
    stock = {"void vllm::rms_norm_kernel<float, 8>(float*)"}
    load = _load({"rms_norm": ["rms_norm_kernel"]}, {"rms_norm": ["rms_norm_kernel"]})  # a decoy @triton.jit
    ev = _judge(load, profile=[{"kernels": {next(iter(stock)): 16}}], native=stock)
    assert ev["slots"]["rms_norm"]["status"] == "not proven"
    assert "launched by the stock engine" in ev["slots"]["rms_norm"]["proof"]
    mine = _judge(load, profile=[{"kernels": {"rms_norm_kernel": 16}}])  # the engine does not launch it: proven
    assert mine["slots"]["rms_norm"]["status"] == "exercised" and mine["slots"]["rms_norm"]["profiler_hits"] == 16


def test_the_committed_stock_names_hold_vllms_own_norm_kernel():
    native = kernel_names.known_native("vllm", "0.26.0")
    assert kernel_names.native_matches("rms_norm_kernel", native)
    assert not kernel_names.native_matches("fk_triton_rms_norm_kernel", native)


def test_a_name_declared_for_two_slots_proves_neither():
    load = _load({"rms_norm": ["spin"], "silu_and_mul": ["spin"]}, {"rms_norm": ["spin"], "silu_and_mul": ["spin"]})
    ev = _judge(load, profile=[{"kernels": {"spin": 40}}])
    assert {e["status"] for e in ev["slots"].values()} == {"not proven"}
    assert "declared for silu_and_mul too" in ev["slots"]["rms_norm"]["proof"]


def test_a_plugin_that_failed_to_load_in_an_engine_process_is_a_load_error():
    """Its hook raised only inside the engine: the process recorded it in its plugin list, not as its own error."""
    load = _load({}, {}, slots=("rms_norm",))
    load["plugins"].insert(0, {"name": "broken", "error": "RuntimeError: only in the engine", "kernels": []})
    ev = _judge(load, "eager")
    assert ev["load_errors"] == ["pid 10: plugin 'broken' failed to load: RuntimeError: only in the engine"]
    status, why = _verdict(_row(ev), [load], allow_unexercised=True)
    assert status == "LOAD_ERROR" and "only in the engine" in why[0]


def test_inductor_generated_names_cannot_prove_a_plugin_kernel():
    """torch.compile generates triton_poi_fused_* etc. for any model, the stock engine's included (audit, s53)."""
    names = {"rms_norm": ["triton_poi_fused_0"], "silu_and_mul": ["fk_triton_silu_and_mul_kernel"]}
    found = {"rms_norm": ["triton_poi_fused_0"], "silu_and_mul": ["fk_triton_silu_and_mul_kernel"]}
    out = kernel_names.unproven(names, found, set())
    assert list(out) == ["rms_norm"] and "a name Inductor gives the kernels it generates" in out["rms_norm"][0]


def test_a_name_the_engines_own_package_defines_as_a_triton_kernel_proves_nothing():
    """A plugin shipping a stub of that name and calling the engine's Triton code would be credited (audit, s53)."""
    found = kernel_names.jit_in_package("vllm", ["_fwd_kernel", "fk_triton_rms_norm_kernel"])
    assert found == ["_fwd_kernel"]
    assert kernel_names.jit_in_package("no_such_package_here", ["_fwd_kernel"]) == []
    out = kernel_names.unproven({"paged_attention": ["_fwd_kernel"]}, {"paged_attention": ["_fwd_kernel"]}, set(),
                                {"paged_attention": found})
    assert "a Triton kernel of the engine's own package too" in out["paged_attention"][0]


def test_only_tritons_decorators_and_real_binaries_define_a_name(tmp_path):
    """A local function called jit, or a text file named like a library, defines nothing (audit, s53)."""
    src = textwrap.dedent("""
        import triton as tr
        from triton import autotune
        from vllm.triton_utils import triton

        def jit(f):
            return f

        @jit
        def fake_kernel():
            pass

        @tr.jit
        def real_kernel():
            pass

        @autotune(configs=[], key=[])
        @triton.jit
        def tuned_kernel():
            pass
    """)
    assert kernel_names._jit_functions(src) == {"real_kernel", "tuned_kernel"}
    (tmp_path / "names.so").write_text("my_norm_kernel\n")
    assert kernel_names._defined_in([tmp_path / "names.so"], ["my_norm_kernel"]) == []
    (tmp_path / "lib.so").write_bytes(b"\x7fELF" + b"\0" * 60 + b"my_norm_kernel\0")
    assert kernel_names._defined_in([tmp_path / "lib.so"], ["my_norm_kernel"]) == ["my_norm_kernel"]


def test_the_engine_package_scan_is_kept_on_disk(monkeypatch, tmp_path):
    """A scan reads every file of the engine (seconds per engine process): each distribution and set of names once."""
    monkeypatch.setenv("FK_CACHE_HOME", str(tmp_path))
    names = ["_fwd_kernel", "fk_triton_rms_norm_kernel"]
    assert kernel_names.jit_in_package("vllm", names) == ["_fwd_kernel"]
    (kept,) = (tmp_path / "kernel-names").iterdir()
    assert kept.name.startswith("vllm-") and kept.read_text() == '["_fwd_kernel"]'

    def no_scan(*a):
        raise AssertionError("scanned again")

    monkeypatch.setattr(kernel_names, "_defined_in", no_scan)
    assert kernel_names.jit_in_package("vllm", list(reversed(names))) == ["_fwd_kernel"]
    kept.write_text("{not json")  # a damaged file is scanned again, not believed
    monkeypatch.undo()
    monkeypatch.setenv("FK_CACHE_HOME", str(tmp_path))
    assert kernel_names.jit_in_package("vllm", names) == ["_fwd_kernel"]
