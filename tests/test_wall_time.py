"""Where the wall time went: an engine process's progress lines in kinds, the engine's own start log, per scenario."""
from fk_adapters import wall_time

MARKS = [["starting vLLM 0.26.0 (compiled)", 4.0], ["correctness: greedy generation", 64.0],
         ["correctness: teacher-forced logprobs", 70.0], ["throughput balanced: repeat 1/3", 75.0],
         ["no probe from the schedulers (TimeoutError: x)", 80.0], ["latency batch1: 3 repeats", 90.0],
         ["profiling a few steps", 100.0]]
LOG = ("INFO Loading weights took 2.50 seconds\nINFO torch.compile took 30.25 s in total\n"
       "INFO Graph capturing finished in 6 secs, took 0.28 GiB\n")


def test_a_process_splits_into_import_start_and_its_phases():
    p = wall_time.process(MARKS, 104.5, LOG)
    assert p == {"python + engine import": 4.0, "engine start": 60.0, "correctness": 11.0, "timed runs": 25.0,
                 "profile": 4.5, "start_parts": {"loading weights": 2.5, "torch.compile": 30.2, "CUDA graphs": 6.0},
                 "total": 104.5}
    assert sum(v for k, v in p.items() if k in wall_time.KINDS) == p["total"]


def test_a_process_that_died_in_its_start_is_all_start():
    assert wall_time.process(MARKS[:1], 30.0) == {"python + engine import": 4.0, "engine start": 26.0, "total": 30.0}
    assert wall_time.process([], 3.0) == {"python + engine import": 3.0, "total": 3.0}


def _side(total, reused=False):
    out = {"phases": wall_time.process(MARKS, total, LOG), "wall_s": total}
    return dict(out, reused_from="/elsewhere") if reused else out


def test_a_scenario_sums_its_processes_and_leaves_reused_ones_out():
    row = {"scenario": "s", "weights_s": 12.0, "baseline": _side(110.0, reused=True), "candidate": _side(104.5),
           "reference": _side(104.5)}
    s = wall_time.scenario(row)
    assert s["processes"] == 2 and s["weights"] == 12.0 and s["total"] == 209.0
    assert s["start_parts"]["torch.compile"] == 60.4  # the engine's own log: every process it started
    assert s["engine start"] == 60.0 and s["timed runs"] == 25.0  # the sides' processes
    assert s[wall_time.REFERENCE] == 104.5 and "reference_reused" not in s  # the float32 process, whole
    md = "\n".join(wall_time.markdown([row], 250.0))
    assert "| s " in md and "4.2 min" in md and "torch.compile 60" in md
    header, _, line = wall_time.markdown([row], 250.0)[-1].split("\n")
    assert dict(zip(_cells(header), _cells(line)))[wall_time.REFERENCE] == "104"


def test_an_engines_failed_float32_run_counts_with_the_transformers_reference_after_it():
    row = {"scenario": "s", "weights_s": 0.0, "baseline": _side(100.0), "candidate": _side(100.0),
           "reference": dict(_side(30.0), failed_first=_side(20.0))}
    s = wall_time.scenario(row)
    assert s["processes"] == 4 and s[wall_time.REFERENCE] == 50.0 and s["total"] == 250.0


def test_a_reused_or_absent_reference_reads_so():
    row = {"scenario": "s", "weights_s": 0.0, "baseline": _side(100.0), "candidate": _side(100.0)}
    for ref, cell in (({}, "-"), (_side(50.0, reused=True), "reused")):
        header, _, line = wall_time.markdown([dict(row, reference=ref)], 250.0)[-1].split("\n")
        cells = dict(zip(_cells(header), _cells(line)))
        assert cells[wall_time.REFERENCE] == cell and cells["processes' total"] == "200"


def test_interleaved_rounds_count_every_process():
    row = {"scenario": "s", "weights_s": 0.0, "baseline": _side(100.0), "candidate": _side(100.0),
           "rounds": {"runs": [[_side(100.0), _side(100.0), _side(100.0)], [_side(100.0)] * 3]}}
    assert wall_time.scenario(row)["processes"] == 6


def test_with_aa_the_second_stock_process_of_every_round_counts_too():
    rounds = [[_side(100.0)] * 3, [_side(100.0)] * 3]
    row = {"scenario": "s", "weights_s": 0.0, "rounds": {"runs": rounds},
           "aa": {"rounds": {"runs": [rounds[0], [_side(50.0)] * 3]}}}
    s = wall_time.scenario(row)
    assert s["processes"] == 9 and s["total"] == 750.0


def test_rows_from_before_phases_were_timed_render_nothing():
    assert wall_time.scenario({"scenario": "old", "baseline": {"wall_s": 3}}) is None
    assert wall_time.markdown([{"scenario": "old"}], None) == []


def test_the_span_no_process_held_is_split_into_gpu_waits_and_fks_own_time():
    row = {"scenario": "s", "weights_s": 10.0, "span_s": 300.0, "baseline": dict(_side(100.0), gpu_wait_s=30.0),
           "candidate": _side(104.5)}
    s = wall_time.scenario(row)
    assert s[wall_time.WAIT] == 30.0 and s[wall_time.OUTSIDE] == 55.5
    header, _, line = wall_time.markdown([row], 300.0)[-1].split("\n")
    cells = dict(zip(_cells(header), _cells(line)))
    assert cells[wall_time.WAIT] == "30" and cells[wall_time.OUTSIDE] == "56"
    assert "5.3 min. 20 s of it outside the scenarios" in "\n".join(wall_time.markdown([row], 320.0))


def test_processes_side_by_side_have_no_outside_share():
    row = {"scenario": "s", "weights_s": 0.0, "span_s": 150.0,
           "rounds": {"runs": [[_side(100.0)] * 2, [_side(100.0)] * 2]}}
    s = wall_time.scenario(row)
    assert wall_time.OUTSIDE not in s and s["total"] == 400.0
    header, _, line = wall_time.markdown([row], 150.0)[-1].split("\n")
    assert dict(zip(_cells(header), _cells(line)))[wall_time.OUTSIDE] == "-"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip("|").split("|")]


SPAWN_LOG = ("WARNING 12-05 15:59:07 [system_utils.py:157] We must use the `spawn` multiprocessing start method. "
             "Overriding VLLM_WORKER_MULTIPROC_METHOD to 'spawn'. See https://docs.vllm.ai/... for more information. "
             "Reasons: CUDA is initialized\n(EngineCore pid=2829) INFO 12-05 15:59:33 [core.py:116] Initializing\n")


def _processes(*logs, core="spawned"):
    return [{"phases": wall_time.process(MARKS, 60.0, log, core if log else "forked")} for log in logs]


def test_an_engine_core_spawned_on_one_side_only_is_said():
    """Session 47's H100 logs: vLLM spawned the candidate's engine core (fk had initialised CUDA in its driver) and
    forked the baseline's."""
    assert wall_time.process(MARKS, 60.0, SPAWN_LOG, "spawned")["spawned"] == "CUDA is initialized"
    (note,) = wall_time.start_findings({"baseline": _processes("", ""), "candidate": _processes(SPAWN_LOG, SPAWN_LOG)})
    assert "spawned the engine core of 2 of 2 candidate process(es) (its reason: CUDA is initialized)" in note
    assert "did not start alike" in note
    assert wall_time.start_findings({"baseline": _processes("", ""), "candidate": _processes("", "")}) == []
    assert wall_time.start_findings({"baseline": _processes(SPAWN_LOG), "candidate": _processes(SPAWN_LOG)}) == []


def test_the_warning_of_a_forked_engine_core_is_no_spawn():
    """Session 48's H100 logs: the candidate's engine core was forked, then fk's install there initialised CUDA and
    vLLM logged its "must use spawn" warning from the child; the driver recorded "forked", and that decides."""
    assert "spawned" not in wall_time.process(MARKS, 60.0, SPAWN_LOG, "forked")
    assert "spawned" not in wall_time.process(MARKS, 60.0, SPAWN_LOG)  # no record (another engine): no claim
    assert wall_time.start_findings({"baseline": _processes("", ""),
                                     "candidate": _processes(SPAWN_LOG, core="forked")}) == []
    assert wall_time.process(MARKS, 60.0, "", "spawned")["spawned"] == "vLLM's start method was spawn"


def test_an_install_that_initialised_cuda_in_a_forked_engine_core_is_said():
    """The load record says when fk's install initialised CUDA in the engine core it forked into (vLLM then spawns that
    core's workers where stock forks them)."""
    forked = {"phases": {}, "loads": [{"installed_in": "a fork of fk's driver", "cuda_initialized_by_install": True}]}
    clean = {"phases": {}, "loads": [{"installed_in": "a fork of fk's driver"}]}
    (note,) = wall_time.start_findings({"baseline": [{"phases": {}}] * 2, "candidate": [forked, clean]})
    assert note.startswith("fk's install initialised CUDA in the forked engine core of 1 of 2 candidate process(es)")
    assert wall_time.start_findings({"baseline": [{"phases": {}}], "candidate": [clean]}) == []
