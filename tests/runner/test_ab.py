"""Suite-level verdicts of the A/B runner, without an engine."""
from types import SimpleNamespace

from fk_adapters import engines
from fk_adapters.runner.ab import RunConfig, evidence_mode, finish


def _row(status, **slots):
    return {"scenario": f"s{len(slots)}{status}", "status": status, "failures": [],
            "evidence": {"slots": {s: {"plugin": "p", "status": st} for s, st in slots.items()}}}


def _cfg(**kw):
    args = dict(engine=engines.get("vllm"), plugins=["p"], device="cuda", mode="compiled", out_dir="/x")
    return RunConfig(**{**args, **kw})


def test_slot_with_no_layer_anywhere_fails_the_suite_unless_allowed_as_uncovered():
    rows = [_row("PASSED", rms_norm="exercised", gelu_and_mul="n/a")]
    res = {"scenarios": rows}
    finish(res, _cfg())
    assert res["verdict"] == "FAIL" and "no scenario of this suite has a layer for: gelu_and_mul" in res["problems"][0]
    finish(res, _cfg(allow_unexercised=True))  # not the same permission
    assert res["verdict"] == "FAIL"
    finish(res, _cfg(allow_uncovered=True))
    assert res["verdict"] == "PASS"


def test_slot_with_layers_that_never_ran_needs_allow_unexercised():
    rows = [_row("NOT_EXERCISED", rms_norm="exercised", silu_and_mul="not exercised")]
    res = {"scenarios": rows}
    finish(res, _cfg(allow_uncovered=True))
    assert res["verdict"] == "FAIL" and any("never exercised in this suite: silu_and_mul" in p for p in res["problems"])


def test_a_scenario_where_no_slot_applies_does_not_fail_the_suite():
    rows = [_row("PASSED", rms_norm="exercised"), _row("NOT_APPLICABLE", rms_norm="n/a")]
    res = {"scenarios": rows}
    finish(res, _cfg())
    assert res["verdict"] == "PASS" and res["problems"] == []
    rows.append(_row("NOT_EXERCISED", rms_norm="not exercised"))
    finish(res, _cfg(allow_unexercised=True))
    assert res["verdict"] == "FAIL" and res["problems"] == [f"{rows[2]['scenario']}: NOT_EXERCISED"]


def test_evidence_mode_follows_the_engine():
    assert evidence_mode(_cfg()) == "compiled"
    assert evidence_mode(_cfg(engine=engines.get("sglang"))) == "graphs"
    assert evidence_mode(_cfg(mode="eager")) == "eager"


def test_compile_cache_folder_follows_the_plugin_code_not_its_settings():
    from fk_adapters.runner.ab import _variant

    def cfg(code):
        return SimpleNamespace(code=code)

    base = {"fk_adapters": "f1", "slow": {"source_sha256": "s1", "info": {"delay_us": 0}}}
    assert _variant(cfg(base), []) == "baseline"
    same = _variant(cfg(base), ["slow"])
    assert same.startswith("slow-")
    assert _variant(cfg(dict(base, slow={"source_sha256": "s1", "info": {"delay_us": 60}})), ["slow"]) == same
    assert _variant(cfg(dict(base, slow={"source_sha256": "s2", "info": {}})), ["slow"]) != same
    assert _variant(cfg(dict(base, fk_adapters="f2")), ["slow"]) != same


def test_gpu_share_records_become_one_line_per_disturbed_run():
    from fk_adapters.runner.ab import gpu_share_findings

    clean = {"gpu_share": {"watched": True, "samples": 9, "foreign": []}}
    other = {"gpu_share": {"watched": True, "samples": 9, "foreign": [
        {"pid": 1234, "name": "python3", "max_used_mib": 18482, "samples": 4},
        {"pid": 99, "name": "x", "max_used_mib": None, "samples": 1, "pid_gone": True}]}}
    blind = {"gpu_share": {"watched": False, "why": "nvidia-smi not found"}}
    disturbed, unwatched = gpu_share_findings({"baseline": [other], "candidate": [clean]})
    assert disturbed == ["baseline: another process used the GPU during this run (pid 1234 python3, up to 18482 MiB; "
                         "pid 99 x (gone before it could be read)): its timings are not comparable"]
    assert unwatched == []
    disturbed, unwatched = gpu_share_findings({"baseline": [clean, blind], "candidate": [blind, other]})
    assert [d.split(":")[0] for d in disturbed] == ["round 2 candidate"]
    assert unwatched == ["round 2 baseline, round 1 candidate: the GPU could not be watched for other processes "
                         "(nvidia-smi not found): these timings are unchecked"]
    assert gpu_share_findings({"baseline": [{}], "candidate": [{}]}) == ([], [])  # not watched on purpose (CPU)
