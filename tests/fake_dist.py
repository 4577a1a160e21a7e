"""An installed-looking distribution on disk: package files and a dist-info with a correct RECORD."""
from __future__ import annotations

import base64
import hashlib
from pathlib import Path


def record_digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def write_dist(site: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """Write ``files`` ({path under site: bytes}) and ``<name>-<version>.dist-info`` into ``site``; return site.

    RECORD lists every file with its hash, plus a .pyc and RECORD itself without one (as pip writes them)."""
    top = sorted({rel.split("/", 1)[0] for rel in files})
    info = f"{name}-{version}.dist-info"
    meta = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
            f"{info}/top_level.txt": "".join(f"{t}\n" for t in top).encode()}
    for rel, data in {**files, **meta}.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    lines = [f"{rel},{record_digest(data)},{len(data)}" for rel, data in {**files, **meta}.items()]
    lines += [f"{top[0]}/__pycache__/x.cpython-311.pyc,,", f"{info}/RECORD,,"]
    (site / info / "RECORD").write_text("\n".join(lines) + "\n")
    return site
