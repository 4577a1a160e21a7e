from fk_adapters import evidence

LOAD = {"pid": 10, "role": "worker", "installed": {
    "rms_norm": {"plugin": "p", "kernel": "k", "entered": ["RMSNorm"]},
    "silu_and_mul": {"plugin": "p", "kernel": "k2", "entered": ["SiluAndMul"]},
    "gelu_and_mul": {"plugin": "p", "kernel": "k3", "entered": ["GeluAndMul"]}},
    "plugins": [{"name": "p", "kernels": [{"slot": "rms_norm", "kernel_names": ["my_norm_kernel"],
                                           "kernel_names_defined": ["my_norm_kernel"]},
                                          {"slot": "silu_and_mul", "kernel_names": []},
                                          {"slot": "gelu_and_mul", "kernel_names": []}]}]}


def _result(calls, traced=None, profile=None, pid=10):
    return {"probe": [{"pid": pid, "calls": calls, "traced": traced or {},
                       "constructed": {"rms_norm": 5, "silu_and_mul": 2}}], "profile": profile}


def test_eager_counts_decide():
    ev = evidence.judge(_result({"p:rms_norm": 7}), [LOAD], "eager")
    s = ev["slots"]
    assert s["rms_norm"]["status"] == "exercised" and s["rms_norm"]["calls"] == 7
    assert s["silu_and_mul"]["status"] == "not exercised"  # a layer exists but the kernel never ran
    assert s["gelu_and_mul"]["status"] == "n/a"
    assert ev["workers"] == [{"pid": 10, "plugins_loaded": True}]


def test_in_eager_mode_a_device_profile_needs_the_declared_names_launched():
    """A kernel that only wraps the engine's own op is called, yet launches none of its names (audit, s53)."""
    stock_only = [{"kernels": {"void vllm::rms_norm_kernel<float>": 9}}]
    ev = evidence.judge(_result({"p:rms_norm": 7, "p:silu_and_mul": 3}, profile=stock_only), [LOAD], "eager")
    assert ev["slots"]["rms_norm"]["status"] == "not exercised" and "0 launches" in ev["slots"]["rms_norm"]["proof"]
    assert ev["slots"]["silu_and_mul"]["status"] == "exercised"  # declares no names: its calls
    ours = [{"kernels": {"my_norm_kernel": 9}}]
    assert evidence.judge(_result({"p:rms_norm": 7}, profile=ours), [LOAD], "eager")["slots"]["rms_norm"][
        "status"] == "exercised"
    cpu = [{"kernels": {}}]  # a profile that saw no device kernel (CPU): the calls decide
    assert evidence.judge(_result({"p:rms_norm": 7}, profile=cpu), [LOAD], "eager")["slots"]["rms_norm"][
        "status"] == "exercised"


def test_the_engines_own_kernel_handed_back_is_marked_and_says_so():
    load = {**LOAD, "installed": {**LOAD["installed"], "silu_and_mul": {
        "plugin": "p", "kernel": "engine:silu_and_mul", "entered": ["SiluAndMul"], "engine_own": True}}}
    ev = evidence.judge(_result({"p:silu_and_mul": 3}), [load], "eager")["slots"]["silu_and_mul"]
    assert ev["status"] == "exercised" and ev["engine_own"] is True
    assert ev["proof"].startswith("the engine's own kernel, handed back by the plugin (no speedup is claimed)")


def test_on_a_device_a_kernel_declaring_no_names_is_marked_and_claims_nothing():
    """A plain function can launch the engine's own Triton or C++ kernels with no op the watch sees: where the profile
    saw device kernels, only declared names tell the plugin's launches from the engine's."""
    device = [{"kernels": {"my_norm_kernel": 9, "void vllm::act_and_mul_kernel<float>": 3}}]
    ev = evidence.judge(_result({"p:rms_norm": 7, "p:silu_and_mul": 3}, profile=device), [LOAD], "eager")["slots"]
    assert ev["silu_and_mul"]["status"] == "exercised" and ev["silu_and_mul"]["unnamed"] is True
    assert ev["silu_and_mul"]["proof"].startswith("declares no kernel names")
    assert "unnamed" not in ev["rms_norm"]  # its declared name was launched
    for profile in (None, [{"kernels": {}}]):  # no profile, or one that saw no device kernel (CPU): the calls decide
        ev = evidence.judge(_result({"p:silu_and_mul": 3}, profile=profile), [LOAD], "eager", device="cpu")["slots"]
        assert ev["silu_and_mul"]["status"] == "exercised" and "unnamed" not in ev["silu_and_mul"]
    ev = evidence.judge(_result({"p:silu_and_mul": 3}), [LOAD], "eager", device="cuda")["slots"]  # --no-profile
    assert ev["silu_and_mul"]["unnamed"] is True
    load = {**LOAD, "installed": {**LOAD["installed"], "silu_and_mul": {
        "plugin": "p", "kernel": "engine:silu_and_mul", "entered": ["SiluAndMul"], "engine_own": True}}}
    ev = evidence.judge(_result({"p:silu_and_mul": 3}, profile=device), [load], "eager")["slots"]["silu_and_mul"]
    assert ev["engine_own"] and "unnamed" not in ev  # already claims nothing, said once


def test_a_librarys_kernel_is_named_as_the_librarys():
    load = {**LOAD, "plugins": [{"name": "p", "kernels": [
        {"slot": "rms_norm", "kernel_names": [], "kernel_library": "vllm"}]}]}
    ev = evidence.judge(_result({"p:rms_norm": 7}), [load], "eager")["slots"]["rms_norm"]
    assert ev["status"] == "exercised" and ev["kernel_library"] == "vllm"
    assert ev["proof"].startswith("vllm's kernels, which the plugin requires rather than ships")


def test_compiled_mode_needs_profiler_names_not_counts():
    profile = [{"kernels": {"void other_kernel": 40}}]
    ev = evidence.judge(_result({"p:rms_norm": 7, "p:silu_and_mul": 3}, {"p:silu_and_mul": 1}, profile),
                        [LOAD], "compiled")
    assert ev["slots"]["rms_norm"]["status"] == "not exercised"  # capture-time calls are not proof
    assert ev["slots"]["silu_and_mul"]["status"] == "exercised"  # no names declared: traced + run
    profile = [{"kernels": {"my_norm_kernel": 16, "my_norm_kernel_2": 5}}]  # exact names: not _2
    ev = evidence.judge(_result({}, {}, profile), [LOAD], "compiled")
    assert ev["slots"]["rms_norm"]["status"] == "exercised" and ev["slots"]["rms_norm"]["profiler_hits"] == 16
    assert ev["slots"]["silu_and_mul"]["status"] == "not exercised"


def test_compiled_mode_accepts_a_graph_from_the_compile_cache():
    """A later round (or run) loads the compiled graph its variant cached: nothing is traced, the op still runs."""
    ev = evidence.judge(_result({"p:silu_and_mul": 3}), [LOAD], "compiled")
    s = ev["slots"]["silu_and_mul"]
    assert s["status"] == "exercised" and "compile cache" in s["proof"]
    ev = evidence.judge(_result({}, {"p:silu_and_mul": 1}), [LOAD], "compiled")
    assert ev["slots"]["silu_and_mul"]["status"] == "not exercised"  # traced but never run


def test_worker_without_load_record_is_visible():
    ev = evidence.judge(_result({"p:rms_norm": 1}, pid=99), [LOAD], "eager")
    assert ev["workers"] == [{"pid": 99, "plugins_loaded": False}]
    bad = dict(LOAD, error="RuntimeError: x")
    assert evidence.judge(_result({}), [bad], "eager")["load_errors"] == ["pid 10: RuntimeError: x"]


def test_verdict_order_load_then_install_then_correctness_then_exercise():
    from fk_adapters.results.verdict import scenario as _verdict

    ok = {"passed": True}
    ev = evidence.judge(_result({"p:rms_norm": 7}), [LOAD], "eager")
    row = {"evidence": ev, "correctness": ok, "failures": []}
    assert _verdict(row, [LOAD], allow_unexercised=False)[0] == "NOT_EXERCISED"  # silu has layers, no calls
    assert _verdict(row, [LOAD], allow_unexercised=True) == ("PASSED", [])
    assert _verdict(dict(row, correctness={"passed": False}), [LOAD], True)[0] == "INCORRECT"
    assert _verdict(row, [], True)[0] == "LOAD_ERROR"
    nothing = {"pid": 10, "notes": ["p:rms_norm skipped: not for device cpu"]}
    empty = {"evidence": evidence.judge(_result({}), [nothing], "eager"), "correctness": ok, "failures": []}
    status, why = _verdict(empty, [nothing], True)
    assert status == "NOT_EXERCISED" and "not for device cpu" in why[0]
    stray = {"evidence": evidence.judge(_result({"p:rms_norm": 1}, pid=99), [LOAD], "eager"), "correctness": ok,
             "failures": []}
    assert _verdict(stray, [LOAD], True)[0] == "LOAD_ERROR"


def test_a_model_with_no_layer_for_any_slot_is_not_applicable_and_one_with_no_call_is_not_exercised():
    from fk_adapters.results.verdict import scenario as _verdict

    no_layer = dict(LOAD, installed={"gelu_and_mul": LOAD["installed"]["gelu_and_mul"]})
    row = {"evidence": evidence.judge(_result({}), [no_layer], "eager"), "correctness": {"passed": True},
           "failures": []}
    assert [e["status"] for e in row["evidence"]["slots"].values()] == ["n/a"]
    assert _verdict(row, [no_layer], allow_unexercised=True) == ("NOT_APPLICABLE", [])
    assert _verdict(dict(row, correctness={"passed": False}), [no_layer], True)[0] == "INCORRECT"  # stock vs stock
    never = {"evidence": evidence.judge(_result({}), [LOAD], "eager"), "correctness": {"passed": True}, "failures": []}
    status, why = _verdict(never, [LOAD], allow_unexercised=True)  # the permission covers some slots, not all
    assert status == "NOT_EXERCISED" and "rms_norm, silu_and_mul" in why[0]


def test_graphs_mode_counts_capture_calls_unless_names_are_declared():
    """SGLang's graphs run the hooked Python at capture: calls prove a nameless kernel ran; names need the profiler."""
    ev = evidence.judge(_result({"p:rms_norm": 7, "p:silu_and_mul": 3}, profile=[{"kernels": {}}]), [LOAD], "graphs")
    assert ev["slots"]["silu_and_mul"]["status"] == "exercised"
    assert ev["slots"]["rms_norm"]["status"] == "not exercised"  # declared names, none in the profile
    ev = evidence.judge(_result({}, profile=[{"kernels": {}}]), [LOAD], "graphs")
    assert ev["slots"]["silu_and_mul"]["status"] == "not exercised"


def test_unknown_evidence_mode_is_an_error():
    import pytest

    with pytest.raises(ValueError, match="evidence mode"):
        evidence.judge(_result({}), [LOAD], "fast")


def test_a_slot_whose_layers_all_stay_stock_says_so_instead_of_no_layer():
    res = _result({"p:rms_norm": 7})
    res["probe"][0]["not_routed"] = {"gelu_and_mul (GeluTanh overrides forward)": 2,
                                     "rms_norm (call: dtype)": 4}
    res["probe"][0]["stock_layers"] = {"gelu_and_mul": 2}
    s = evidence.judge(res, [LOAD], "eager")["slots"]
    assert s["gelu_and_mul"]["status"] == "n/a"
    assert s["gelu_and_mul"]["proof"] == "no layer the model built can route here (2 left stock, see the notes)"
    assert s["rms_norm"]["status"] == "exercised"  # a stock call of a routed layer changes nothing


def _ranked(calls_per_rank, world=None, profile=None):
    world = world or len(calls_per_rank)
    return {"probe": [{"pid": 10 + r, "rank": r, "world_size": world, "calls": calls,
                       "constructed": {"rms_norm": 5, "silu_and_mul": 2}} for r, calls in calls_per_rank.items()],
            "profile": profile}


def test_under_tensor_parallelism_every_rank_must_show_its_kernel_ran():
    ev = evidence.judge(_ranked({0: {"p:rms_norm": 7}, 1: {"p:rms_norm": 7}}), [LOAD], "eager")
    s = ev["slots"]["rms_norm"]
    assert s["status"] == "exercised" and "each of the 2 tensor-parallel ranks" in s["proof"]
    assert s["ranks"] == {r: {"reported": True, "layers": 5, "calls": 7} for r in (0, 1)}
    assert [w["rank"] for w in ev["workers"]] == [0, 1]
    ev = evidence.judge(_ranked({0: {"p:rms_norm": 14}, 1: {}}), [LOAD], "eager")
    s = ev["slots"]["rms_norm"]
    assert s["status"] == "not exercised" and "rank 1: no call" in s["proof"]  # the sum alone would pass


def test_a_rank_that_reported_nothing_fails_the_slot():
    ev = evidence.judge(_ranked({0: {"p:rms_norm": 7}, 1: {"p:rms_norm": 7}}, world=4), [LOAD], "eager")
    s = ev["slots"]["rms_norm"]
    assert s["status"] == "not exercised" and "rank 2: no evidence reported; rank 3: no evidence reported" in s["proof"]


def test_by_profiler_names_each_rank_needs_its_own_launches():
    profile = [{"pid": 10, "rank": 0, "kernels": {"my_norm_kernel": 16}}, {"pid": 11, "rank": 1, "kernels": {}}]
    ev = evidence.judge(_ranked({0: {}, 1: {}}, profile=profile), [LOAD], "compiled")
    s = ev["slots"]["rms_norm"]
    assert s["status"] == "not exercised" and "rank 1: no launch of its kernels" in s["proof"]
    profile[1]["kernels"] = {"my_norm_kernel": 16}
    ev = evidence.judge(_ranked({0: {}, 1: {}}, profile=profile), [LOAD], "compiled")
    s = ev["slots"]["rms_norm"]
    assert s["status"] == "exercised" and s["ranks"][1]["profiler_hits"] == 16


def test_workers_that_did_not_say_their_rank_are_judged_by_each_ranks_profile():
    # session 28: SGLang's schedulers gave no rank (fk read it from the wrong attribute); the sum of both ranks'
    # launches must not stand in for each rank's
    res = {"probe": [{"pid": 10 + r, "calls": {}, "constructed": {"rms_norm": 5}} for r in (0, 1)],
           "profile": [{"pid": 10, "rank": 0, "kernels": {"my_norm_kernel": 32}},
                       {"pid": 11, "rank": 1, "kernels": {}}]}
    s = evidence.judge(res, [LOAD], "compiled")["slots"]["rms_norm"]
    assert s["status"] == "not exercised" and "rank 1: no launch of its kernels" in s["proof"]
    assert s["ranks"][0] == {"reported": True, "layers": None, "calls": None, "profiler_hits": 32}
    res["profile"][1]["kernels"] = {"my_norm_kernel": 16}
    s = evidence.judge(res, [LOAD], "compiled")["slots"]["rms_norm"]
    assert s["status"] == "exercised" and "each of the 2 tensor-parallel ranks" in s["proof"]
    res["profile"][1]["rank"] = 2  # the profiles of ranks 0 and 2: rank 1 gave no evidence
    s = evidence.judge(res, [LOAD], "compiled")["slots"]["rms_norm"]
    assert s["status"] == "not exercised" and "rank 1: no evidence reported" in s["proof"]
    res["profile"] = [{"pid": 10, "rank": 0, "kernels": {"my_norm_kernel": 32}}]  # one GPU: SGLang's "TP-0" trace
    s = evidence.judge(res, [LOAD], "compiled")["slots"]["rms_norm"]
    assert s["status"] == "exercised" and "ranks" not in s


def test_an_engine_own_kernel_left_on_the_compiled_native_path_is_proven_by_its_traces_only():
    """A passthrough's call left to vLLM's compiled forward_native counts per trace; a slot whose layers were
    built but never traced stays unexercised."""
    res = _result({})
    res["probe"][0]["native_path"] = {"p:silu_and_mul": 3}
    s = evidence.judge(res, [LOAD], "graphs")["slots"]
    assert s["silu_and_mul"]["status"] == "exercised" and "engine's own path" in s["silu_and_mul"]["proof"]
    assert s["silu_and_mul"]["native_path"] == 3 and s["silu_and_mul"]["calls"] == 0
    assert s["rms_norm"]["status"] == "not exercised"  # layers built, nothing traced or run


def test_engine_own_native_path_counts_on_every_rank():
    res = _ranked({0: {}, 1: {}})
    res["probe"][0]["native_path"] = {"p:rms_norm": 2}
    s = evidence.judge(res, [LOAD], "compiled")["slots"]["rms_norm"]
    assert s["status"] == "not exercised" and "rank 1: no call" in s["proof"]
    res["probe"][1]["native_path"] = {"p:rms_norm": 2}
    s = evidence.judge(res, [LOAD], "compiled")["slots"]["rms_norm"]
    assert s["status"] == "exercised" and s["ranks"][1]["calls"] == 2
