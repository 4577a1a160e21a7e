"""Kernels compiled during a timed repeat, seen as new entries in Triton's cache folder."""
from fk_adapters import jit_watch


def test_the_cache_folder_follows_tritons_own_settings(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    assert jit_watch.cache_dir() == str(tmp_path / ".triton" / "cache")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/x/cache")
    assert jit_watch.cache_dir() == "/x/cache"


def test_new_entries_name_their_kernels(tmp_path):
    (tmp_path / "old").mkdir()
    mark = jit_watch.Since([str(tmp_path)])
    for h, files in {"a1": ["fused_moe_kernel.json", "fused_moe_kernel.cubin", "__grp__fused_moe_kernel.json"],
                     "b2": ["fused_moe_kernel.json"], "c3": ["_layer_norm_fwd.json"], "d4": []}.items():
        (tmp_path / h).mkdir()
        for f in files:
            (tmp_path / h / f).write_text("")
    new = mark.new()
    assert sorted(new) == ["?", "_layer_norm_fwd", "fused_moe_kernel", "fused_moe_kernel"]
    assert jit_watch.summary(new) == "? x1, _layer_norm_fwd x1, fused_moe_kernel x2"
    assert jit_watch.Since([str(tmp_path / "absent")]).new() == []


def test_the_engines_own_triton_folders_are_watched_too(monkeypatch, tmp_path):
    """vLLM's compiled mode points its engine process's TRITON_CACHE_DIR into its compile cache, under the cache root
    fk gives each variant (VLLM_CACHE_ROOT): the fk driver's own TRITON_CACHE_DIR never sees those compiles."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "vllm"))
    rank = tmp_path / "vllm" / "torch_compile_cache" / "abc123" / "rank_0_0"
    (rank / "inductor_cache" / "zz" / "triton_cache").mkdir(parents=True)  # inside Inductor's: not walked
    mark = jit_watch.Since()
    for folder, h in ((rank / "triton_cache", "h1"), (tmp_path / "vllm" / "other" / "triton_cache", "h2"),
                      (rank / "inductor_cache" / "zz" / "triton_cache", "h3")):
        (folder / h).mkdir(parents=True)
        (folder / h / "fused_moe_kernel.json").write_text("")
    assert mark.new() == ["fused_moe_kernel", "fused_moe_kernel"]


def test_inductors_triton_folders_are_watched(monkeypatch, tmp_path):
    """A process whose first Triton kernel was Inductor's has TRITON_CACHE_DIR set by Inductor to its own folder."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    (tmp_path / "inductor" / "triton" / "0").mkdir(parents=True)
    mark = jit_watch.Since()
    (tmp_path / "inductor" / "triton" / "0" / "h1").mkdir()
    (tmp_path / "inductor" / "triton" / "0" / "h1" / "_gated_delta_kernel.json").write_text("")
    assert mark.new() == ["_gated_delta_kernel"]


def test_findings_name_each_run_that_was_timed_again():
    redone = {"retimed": [{"workload": "throughput prefill-heavy", "elapsed_s": 5.16,
                           "compiled": "fused_moe_kernel x1"}]}
    kept = {"compiled_while_timed": [{"workload": "latency batch1", "elapsed_s": 0.4, "compiled": "k x1"}]}
    runs = {"baseline": [{"perf": {}}, {"perf": kept}], "candidate": [{"perf": redone}, {"perf": {}}]}
    assert jit_watch.findings(runs) == [
        "round 2 baseline: still compiling after 2 re-runs, these timings include it: latency batch1 (k x1)",
        "round 1 candidate: 1 timed run(s) re-run, Triton compiled kernels during them: "
        "throughput prefill-heavy 5.16 s (fused_moe_kernel x1)"]
    assert jit_watch.findings({"baseline": [{}], "candidate": [{"perf": {}}]}) == []
