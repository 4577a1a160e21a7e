"""Tests for fk_adapters.doctor against a tiny fake distribution on disk."""
from __future__ import annotations

import base64
import hashlib
import importlib
import time

import pytest

from fk_adapters.doctor import DoctorError, doctor, find_engine_dist, render, verify_record

FILES = {
    "fakepkg/__init__.py": b"VALUE = 1\n",
    "fakepkg/core.py": b"def add(a, b):\n    return a + b\n",
}


def _digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@pytest.fixture
def fakedist(tmp_path, monkeypatch):
    """Install fakepkg 1.0 (package + dist-info with a correct RECORD) into tmp_path."""
    (tmp_path / "fakepkg").mkdir()
    info = tmp_path / "fakepkg-1.0.dist-info"
    info.mkdir()
    for rel, data in FILES.items():
        (tmp_path / rel).write_bytes(data)
    meta = {
        "METADATA": b"Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n",
        "top_level.txt": b"fakepkg\n",
    }
    for name, data in meta.items():
        (info / name).write_bytes(data)
    lines = [f"{rel},{_digest(data)},{len(data)}" for rel, data in FILES.items()]
    lines += [f"fakepkg-1.0.dist-info/{n},{_digest(d)},{len(d)}" for n, d in meta.items()]
    lines += ["fakepkg/__pycache__/core.cpython-311.pyc,,",
              "fakepkg-1.0.dist-info/RECORD,,"]
    (info / "RECORD").write_text("\n".join(lines) + "\n")
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
