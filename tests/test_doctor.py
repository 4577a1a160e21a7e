"""Tests for fk_adapters.doctor against a tiny fake distribution on disk."""
from __future__ import annotations

import importlib
import os
import shutil
import time

import pytest
from fake_dist import write_dist

from fk_adapters import doctor as doctor_mod, engine_integrity
from fk_adapters.doctor import DoctorError, doctor, find_engine_dist, render, verify_record

FILES = {
    "fakepkg/__init__.py": b"VALUE = 1\n",
    "fakepkg/core.py": b"def add(a, b):\n    return a + b\n",
}


@pytest.fixture
def fakedist(tmp_path, monkeypatch):
    """Install fakepkg 1.0 (package + dist-info with a correct RECORD) into tmp_path."""
    write_dist(tmp_path, "fakepkg", "1.0", FILES)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return tmp_path


def test_unmodified(fakedist):
    rep = verify_record("fakepkg")
    assert rep["dist"] == "fakepkg" and rep["version"] == "1.0"
    assert rep["files_checked"] == 4 and rep["files_skipped"] == 2
    assert rep["modified"] == [] and rep["missing"] == [] and rep["unrecorded_py"] == []
    assert rep["unmodified"] is True


def test_modified_byte(fakedist):
    p = fakedist / "fakepkg/core.py"
    data = bytearray(p.read_bytes())
    data[-2] ^= 0x01  # same size, different content: caught by the hash
    p.write_bytes(bytes(data))
    rep = verify_record("fakepkg")
    assert rep["modified"] == ["fakepkg/core.py"]
    assert rep["unmodified"] is False


def test_size_change(fakedist):
    (fakedist / "fakepkg/__init__.py").write_bytes(b"VALUE = 2  # patched\n")
    rep = verify_record("fakepkg")
    assert rep["modified"] == ["fakepkg/__init__.py"] and not rep["unmodified"]


def test_missing_file(fakedist):
    (fakedist / "fakepkg/core.py").unlink()
    rep = verify_record("fakepkg")
    assert rep["missing"] == ["fakepkg/core.py"] and rep["modified"] == []
    assert rep["unmodified"] is False


def test_unrecorded_py(fakedist):
    (fakedist / "fakepkg/sub").mkdir()
    (fakedist / "fakepkg/sub/extra.py").write_text("X = 1\n")
    (fakedist / "fakepkg/__pycache__").mkdir()
    (fakedist / "fakepkg/__pycache__/stray.py").write_text("")  # caches are ignored
    rep = verify_record("fakepkg")
    assert rep["unrecorded_py"] == ["fakepkg/sub/extra.py"]
    assert rep["modified"] == [] and rep["missing"] == []
    assert rep["unmodified"] is False
    assert "added fakepkg/sub/extra.py" in render({"record": rep, "device": {}})


def test_unknown_dist_raises(fakedist):
    with pytest.raises(DoctorError, match="not installed"):
        verify_record("no-such-dist-fk-xyz")
    with pytest.raises(DoctorError, match="not installed"):
        doctor("no_such_module_fk_xyz")


def test_find_engine_dist(fakedist):
    dist = find_engine_dist("fakepkg")
    assert dist is not None and dist.metadata["Name"] == "fakepkg"
    assert find_engine_dist("no_such_module_fk_xyz") is None


def test_doctor_and_render(fakedist):
    rep = doctor("fakepkg")
    assert rep["engine"] == "fakepkg" and rep["dist"] == "fakepkg"
    assert rep["engine_version"] == "1.0" and rep["record"]["unmodified"]
    assert rep["shadowed"] is False
    assert set(rep["device"]) >= {"torch", "cuda", "device", "device_count", "triton"}
    text = render(rep)
    assert "fakepkg 1.0" in text and "4 verified against RECORD, unmodified" in text
    assert set(rep["host_cpus"]["ms"]) == os.sched_getaffinity(0)  # every CPU surveyed (cpu_speed)
    assert f"host CPUs: {len(os.sched_getaffinity(0))}, the same Python work" in text
    assert "free for the model cache" in text and [w for d in rep["disk"] for w in d["uses"]] == [
        "the model cache", "fk's caches", "temporary files"]


@pytest.mark.engine
def test_real_vllm_unmodified():
    pytest.importorskip("vllm")
    t0 = time.perf_counter()
    rep = doctor("vllm")
    elapsed = time.perf_counter() - t0
    rec = rep["record"]
    print(f"\ndoctor('vllm'): {rec['files_checked']} files in {elapsed:.2f}s\n{render(rep)}")
    assert rec["unmodified"], render(rep)
    assert rec["files_checked"] > 1000
    assert elapsed < 60


# ------------------------------------------------------- the cached check fk run makes (engine_integrity)

@pytest.fixture
def cache(fakedist, tmp_path_factory, monkeypatch):
    """An empty integrity cache; the hashes of the check that follows, counted in ``hashed``."""
    monkeypatch.setenv(engine_integrity.CACHE_ENV, str(tmp_path_factory.mktemp("integrity")))
    hashed = []
    real = doctor_mod._file_digest
    monkeypatch.setattr(doctor_mod, "_file_digest", lambda path, algo: hashed.append(path) or real(path, algo))
    return hashed


def _flip_a_byte(path, keep_mtime=False):
    """Same size, different bytes; a later mtime, or the old one put back (as ``cp -p`` or ``touch -r`` leave it)."""
    st = os.stat(path)
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns if keep_mtime else st.st_mtime_ns + 10**9))


def test_the_cache_hashes_a_file_again_once_its_bytes_changed(cache, fakedist, monkeypatch):
    monkeypatch.setattr(doctor_mod, "_SETTLE_NS", 0)  # the files were written just now
    first = engine_integrity.check(["fakepkg"])
    assert first["unmodified"] and first["files_checked"] == 4 and first["files_from_cache"] == 0 and len(cache) == 4
    assert os.path.basename(first["cache"]).startswith("fakepkg-1.0-")  # per dist, version and location
    cache.clear()
    warm = engine_integrity.check(["fakepkg"])
    assert warm["unmodified"] and warm["files_from_cache"] == 4 and cache == []
    _flip_a_byte(fakedist / "fakepkg/core.py")
    for _ in range(2):  # and a file found modified is never vouched for later
        cache.clear()
        rep = engine_integrity.check(["fakepkg"])
        assert rep["modified"] == ["fakepkg/core.py"] and not rep["unmodified"] and rep["differ"] == 1
        assert rep["files_from_cache"] == 3 and cache == [str(fakedist / "fakepkg/core.py")]


def test_an_edit_that_puts_the_old_mtime_back_is_caught(cache, fakedist, monkeypatch):
    monkeypatch.setattr(doctor_mod, "_SETTLE_NS", 0)
    assert engine_integrity.check(["fakepkg"])["unmodified"]
    time.sleep(0.01)  # the edit's ctime must be later than the check's
    _flip_a_byte(fakedist / "fakepkg/core.py", keep_mtime=True)
    rep = engine_integrity.check(["fakepkg"])
    assert rep["modified"] == ["fakepkg/core.py"] and rep["files_from_cache"] == 3


def test_files_changed_moments_ago_are_hashed_every_time(cache, fakedist):
    engine_integrity.check(["fakepkg"])
    cache.clear()
    rep = engine_integrity.check(["fakepkg"])
    assert rep["unmodified"] and rep["files_from_cache"] == 0 and len(cache) == 4


def test_how_fk_names_an_engine():
    ok = {"dist": "vllm", "version": "1", "modified": [], "missing": [], "unrecorded_py": [], "differ": 0,
          "imports_from": None, "unmodified": True}
    bad = dict(ok, modified=["vllm/a.py"], unrecorded_py=["vllm/b.py"], differ=2, unmodified=False)
    assert engine_integrity.describe("vllm", ok, "1") == "stock vllm 1"
    assert engine_integrity.describe("vllm", bad) == "MODIFIED vllm (2 file(s) differ from its RECORD)"
    assert "stock" not in engine_integrity.describe("vllm", None)  # results of an fk that did not check
    assert "stock" not in engine_integrity.describe("vllm", {"error": "no RECORD"})
    assert engine_integrity.refusal({"vllm": ok}) == "" and engine_integrity.problems({"vllm": ok}) == []
    line = engine_integrity.refusal({"vllm": bad})
    assert line.startswith("vllm is MODIFIED (2 file(s) differ from its RECORD): modified vllm/a.py, added vllm/b.py")
    assert engine_integrity.refusal({"vllm": {"error": "no RECORD"}}).startswith("vllm could not be verified")
    ref = {"error": "not installed", "role": engine_integrity.REFERENCE_ROLE}  # a reference not installed: stated
    assert engine_integrity.refusal({"vllm": ok, "transformers": ref}) == ""
    problem = engine_integrity.problems({"transformers": dict(bad, role="r")})[0]
    assert problem.startswith("transformers (r) is MODIFIED")


def test_doctor_says_the_free_disk_where_fk_writes_one_line_a_disk(tmp_path):
    disks = doctor_mod.disk_free({"a": str(tmp_path / "not" / "made"), "b": str(tmp_path), "c": "/proc"})
    here = next(d for d in disks if "a" in d["uses"])  # a folder not made yet: measured at its parent
    assert here["uses"] == ["a", "b"] and here["paths"] == [str(tmp_path / "not" / "made"), str(tmp_path)]
    assert abs(here["free_bytes"] - shutil.disk_usage(tmp_path).free) < 2**26
    assert len(disks) == 2 and disks[1]["uses"] == ["c"]  # /proc: a file system of its own
    text = render({"disk": disks, "record": {}, "device": {}})
    assert f"GiB free for a and b ({tmp_path / 'not' / 'made'}, {tmp_path})" in text
