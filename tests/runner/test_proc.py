"""run_job with a stand-in driver: the GPU watch travels with every result, ok or not."""
import json
import os
import sys
import textwrap
import time

import pytest

from fk_adapters import gpu_share
from fk_adapters.runner.proc import GPU_SHARE_FILE, run_job

DRIVER = """
    import json, sys, time
    job = json.load(open(sys.argv[1]))
    time.sleep(job["sleep"])
    if job["ok"]:
        json.dump({"status": "ok"}, open(sys.argv[2], "w"))
"""


@pytest.fixture
def driver(tmp_path, monkeypatch):
    (tmp_path / "fake_driver.py").write_text(textwrap.dedent(DRIVER))
    # the GPU: pid 1 (another session) on it beside whatever runs
    monkeypatch.setattr(gpu_share, "gpu_processes", lambda: [{"pid": 1, "name": "init", "used_mib": 7, "gpu": "g"}])
    monkeypatch.setattr(gpu_share, "INTERVAL_S", 0.05)
    return lambda job, run_dir, timeout=30, **kw: run_job(sys.executable, "fake_driver", job, str(tmp_path / run_dir),
                                                          {"PYTHONPATH": str(tmp_path)}, timeout, **kw)


@pytest.mark.skipif(not os.path.exists("/proc/1/stat"), reason="no /proc")
def test_the_watch_is_in_the_result_and_beside_it_for_ok_error_and_timeout(driver, tmp_path):
    ok = driver({"sleep": 0.2, "ok": True}, "ok", watch_gpu=True)
    assert ok["status"] == "ok" and ok["gpu_share"]["watched"] and ok["gpu_share"]["samples"] >= 1
    assert ok["gpu_share"]["foreign"][0]["pid"] == 1
    with open(tmp_path / "ok" / GPU_SHARE_FILE) as f:
        assert json.load(f) == ok["gpu_share"]
    crashed = driver({"sleep": 0.0, "ok": False}, "crashed", watch_gpu=True)
    assert crashed["status"] == "crashed" and crashed["gpu_share"]["watched"]
    late = driver({"sleep": 30, "ok": True}, "late", timeout=1, watch_gpu=True)
    assert late["status"] == "timeout" and late["gpu_share"]["foreign"][0]["samples"] >= 2


def test_without_watch_gpu_there_is_no_watch(driver, tmp_path):
    res = driver({"sleep": 0.0, "ok": True}, "plain")
    assert res["status"] == "ok" and "gpu_share" not in res
    assert not (tmp_path / "plain" / GPU_SHARE_FILE).exists()


def test_a_cuda_run_waits_for_another_fk_run_on_the_same_gpu(driver, tmp_path, monkeypatch):
    import threading

    from fk_adapters import gpu_lock

    monkeypatch.setenv("FK_LOCK_DIR", str(tmp_path))
    path = gpu_lock.lock_path({})
    said, inside = [], threading.Event()

    def other_run():
        with gpu_lock.held(path, said.append):
            inside.set()
            time.sleep(0.6)

    other = threading.Thread(target=other_run)
    other.start()
    inside.wait(5)
    t0 = time.perf_counter()
    res = driver({"sleep": 0.0, "ok": True}, "waited", watch_gpu=True, echo=said.append)
    other.join()
    assert res["status"] == "ok" and time.perf_counter() - t0 >= 0.4 and res["gpu_wait_s"] >= 0.3
    assert any(m.startswith("waiting for the GPU: another fk engine run holds") for m in said)
    assert gpu_lock.lock_path({"CUDA_VISIBLE_DEVICES": "1"}) != path  # other devices: another lock
    said.clear()
    cpu = driver({"sleep": 0.0, "ok": True}, "cpu", echo=said.append)
    assert cpu["status"] == "ok" and not said and "gpu_wait_s" not in cpu  # no lock


# Lines of the float32 reference runs that vLLM 0.26 could not start on an H100 (session 9)
ENGINE_CORE_LOG = """\
(EngineCore pid=5166) INFO 11-22 22:21:50 [core.py:116] Initializing a V1 LLM engine (v0.26.0)
(EngineCore pid=5166) ERROR 11-22 22:22:00 [core.py:1332] EngineCore failed to start.
(EngineCore pid=5166) ERROR 11-22 22:22:00 [core.py:1332] Traceback (most recent call last):
(EngineCore pid=5166) ERROR 11-22 22:22:00 [core.py:1332] AssertionError: ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""  # noqa: E501 (log lines kept as the engine wrote them)


def test_the_first_logged_error_names_the_root_cause():
    from fk_adapters.runner.proc import first_logged_error

    assert first_logged_error(ENGINE_CORE_LOG) == ("AssertionError: ChunkGatedDeltaRuleFunction does not support "
                                                   "float32. Please use bfloat16.")
    assert first_logged_error("INFO all fine\nRuntimeError: not at ERROR level\n") is None
    assert len(first_logged_error("ERROR x ValueError: " + "y" * 1000)) == 300


SCHEDULER_LOG = """\
[2026-11-23 06:59:53] Scheduler hit an exception: Traceback (most recent call last):
  File "/tmp/fk-site/sglang/sgl_kernel/elementwise.py", line 27, in _rmsnorm_internal
    torch.ops.sgl_kernel.rmsnorm.default(out, input, weight, eps, enable_pdl)
RuntimeError: rmsnorm(at::Tensor&, at::Tensor&, at::Tensor&, double, bool)::<lambda()> failed to dispatch data type Float

RuntimeError: a later, generic failure
"""  # noqa: E501 (log lines kept as the engine wrote them)


def test_without_an_error_level_line_the_first_traceback_names_the_root_cause():
    from fk_adapters.runner.proc import first_logged_error

    assert first_logged_error(SCHEDULER_LOG) == ("RuntimeError: rmsnorm(at::Tensor&, at::Tensor&, at::Tensor&, double, "
                                                 "bool)::<lambda()> failed to dispatch data type Float")


def test_a_failed_run_names_the_root_cause_its_engine_logged(tmp_path):
    (tmp_path / "loud_driver.py").write_text(f"print({ENGINE_CORE_LOG!r}, flush=True)\nraise SystemExit(1)\n")
    res = run_job(sys.executable, "loud_driver", {}, str(tmp_path / "run"), {"PYTHONPATH": str(tmp_path)}, 30)
    assert res["status"] == "crashed"
    assert res["error"] == ("engine process exited with code 1 without a result (first logged error: AssertionError: "
                            "ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16.)")


def test_an_engine_that_went_quiet_after_a_fatal_line_is_killed_before_its_time_limit(tmp_path, monkeypatch):
    from fk_adapters.runner import proc

    monkeypatch.setattr(proc, "QUIET_AFTER_FATAL_S", 1.0)
    (tmp_path / "stuck_driver.py").write_text(
        "import time\nprint('(Worker_TP1 pid=5) torch.AcceleratorError: CUDA error: an illegal memory access was "
        "encountered', flush=True)\ntime.sleep(60)\n")
    t0 = time.perf_counter()
    res = run_job(sys.executable, "stuck_driver", {}, str(tmp_path / "run"), {"PYTHONPATH": str(tmp_path)}, 30)
    assert time.perf_counter() - t0 < 15
    assert res["status"] == "crashed" and res["error"].startswith(
        "the engine logged a fatal error ((Worker_TP1 pid=5) torch.AcceleratorError: CUDA error: an illegal memory "
        "access was encountered) and printed nothing for 1 s: killed")
    (tmp_path / "busy_driver.py").write_text(  # still talking after the line: left to its time limit
        "import time\nprint('terminate called after throwing an instance of X', flush=True)\n"
        "for _ in range(8):\n    time.sleep(0.5); print('still here', flush=True)\n")
    res = run_job(sys.executable, "busy_driver", {}, str(tmp_path / "busy"), {"PYTHONPATH": str(tmp_path)}, 30)
    assert res["status"] == "crashed" and res["error"].startswith("engine process exited with code 0 without")
