"""Kernels compiled during a timed repeat, read from the run's own compile log."""
import os
import subprocess
import sys

from fk_adapters import jit_watch

PUT = "from triton.runtime.cache import get_cache_manager as g; g('{key}').put('{{}}', 'fused_moe_kernel.json', False)"


def test_each_compile_of_the_runs_own_processes_is_logged_and_read_back(triton_compiles):
    triton_compiles("_layer_norm_fwd")  # before the mark: not counted
    mark = jit_watch.Since()
    triton_compiles("fused_moe_kernel")
    code = PUT.format(key="ab12")
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))  # another process of the run
    new = mark.new()
    assert new == ["fused_moe_kernel", "fused_moe_kernel"]
    assert jit_watch.summary(new + ["?"]) == "? x1, fused_moe_kernel x2"
    assert jit_watch.Since().new() == []


def test_a_compile_outside_the_run_is_not_counted(triton_compiles, tmp_path):
    """Session 43: two fk runs side by side on one machine shared Triton's cache folders, and each counted the other's
    compiles as its own."""
    mark = jit_watch.Since()
    os.makedirs(tmp_path / "theirs")
    theirs = dict(os.environ, **jit_watch.engine_env(str(tmp_path / "theirs")))
    code = PUT.format(key="cd34")
    subprocess.run([sys.executable, "-c", code], check=True, env=theirs)
    assert mark.new() == [] and (tmp_path / "theirs" / jit_watch.LOG_FILE).exists()


def test_a_users_own_cache_manager_is_left_alone(monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "their.module:Manager")
    assert jit_watch.engine_env("/r") == {}
    monkeypatch.delenv("TRITON_CACHE_MANAGER")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/theirs/triton")
    assert jit_watch.engine_env("/r") == {"TRITON_CACHE_MANAGER": jit_watch.MANAGER,
                                          "FK_TRITON_COMPILE_LOG": "/r/triton_compiles.log",
                                          "FK_TRITON_CACHE_DIR": "/theirs/triton"}
    monkeypatch.delenv("FK_TRITON_COMPILE_LOG", raising=False)
    assert jit_watch.Since().new() == []  # no log: nothing is known to have compiled


def test_every_engine_process_shares_one_triton_cache_whatever_the_engine_sets(triton_compiles, tmp_path):
    """vLLM sets TRITON_CACHE_DIR inside each side's compile-cache folder (session 58: its own kernels compiled once a
    side, and again in a hold whose vLLM variables differed from the staged caches')."""
    code = f"import os; os.environ['TRITON_CACHE_DIR'] = {str(tmp_path / 'vllm-side')!r}; " + PUT.format(key="ef56")
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))
    [key] = os.listdir(tmp_path / "cache")
    assert os.listdir(tmp_path / "cache" / key) == ["fused_moe_kernel.json"]
    assert not (tmp_path / "vllm-side").exists()


def test_the_shared_triton_cache_is_the_folder_triton_would_use_in_fks_process(monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("TRITON_HOME", "/h")
    assert jit_watch.engine_env("/r")["FK_TRITON_CACHE_DIR"] == "/h/.triton/cache"
    monkeypatch.delenv("TRITON_HOME")
    assert jit_watch.shared_cache_dir() == os.path.join(os.path.expanduser("~"), ".triton", "cache")


def test_findings_name_each_run_that_was_timed_again():
    redone = {"retimed": [{"workload": "throughput prefill-heavy", "elapsed_s": 5.16,
                           "compiled": "fused_moe_kernel x1"}]}
    kept = {"compiled_while_timed": [{"workload": "latency batch1", "elapsed_s": 0.4, "compiled": "k x1"}]}
    runs = {"baseline": [{"perf": {}}, {"perf": kept}], "candidate": [{"perf": redone}, {"perf": {}}]}
    assert jit_watch.findings(runs) == [
        "round 2 baseline: still compiling after 2 re-runs, these timings include it: latency batch1 (k x1)",
        "round 1 candidate: 1 timed run(s) re-run, Triton compiled or autotuned kernels during them: "
        "throughput prefill-heavy 5.16 s (fused_moe_kernel x1)"]
    assert jit_watch.findings({"baseline": [{}], "candidate": [{"perf": {}}]}) == []


def test_a_manager_triton_could_not_import_is_switched_off_before_the_engine_starts(monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_MANAGER", jit_watch.MANAGER)
    monkeypatch.setenv("FK_TRITON_COMPILE_LOG", "/r/log")
    assert jit_watch.ready() == ""
    monkeypatch.setitem(sys.modules, "fk_adapters.triton_compile_log", None)  # as where Triton is missing
    assert "not watched" in jit_watch.ready()
    assert "TRITON_CACHE_MANAGER" not in os.environ and "FK_TRITON_COMPILE_LOG" not in os.environ


AUTOTUNED = """
import torch, triton, triton.language as tl
from fk_adapters import jit_watch
jit_watch.ready()  # as fk's engine driver does before the engine starts: this installs the autotune watch

@triton.autotune(configs=[triton.Config({"B": 16}), triton.Config({"B": 32})], key=["n"],
                 do_bench=lambda fn, quantiles=None: (fn(), [1.0, 1.0, 1.0])[1])
@triton.jit
def fk_tuned_add(x, y, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + i, tl.load(x + i, mask=i < n) + 1, mask=i < n)

for n in (40, 40, 24):  # the second call at n=40 reuses the tuned config: nothing benchmarked
    x, y = torch.zeros(n), torch.empty(n)
    fk_tuned_add[lambda meta: (triton.cdiv(n, meta["B"]),)](x, y, n)
    assert torch.equal(y, x + 1)
"""


def test_each_config_an_autotune_benchmarks_is_logged(triton_compiles):
    """A kernel loaded from a warm cache still benchmarks every config at a new key: one-time work a short warm-up can
    leave inside a timed repeat, which no compile shows."""
    mark = jit_watch.Since()
    env = dict(os.environ, TRITON_INTERPRET="1")
    subprocess.run([sys.executable, "-c", AUTOTUNED], check=True, env=env)
    assert mark.new() == ["autotune:fk_tuned_add"] * 4  # two configs at n=40, two at n=24
