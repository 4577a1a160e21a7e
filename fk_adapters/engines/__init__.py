"""The engines fk can drive, and how to start one of their runs.

Only this table and the per-engine subpackages know engine specifics; the runner,
metrics and reports are engine-agnostic. Nothing here imports an engine: each run is a
subprocess (possibly with its own Python, ``FK_<ENGINE>_PYTHON``) that imports it.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field


class EngineError(ValueError):
    """Unknown engine, or an engine that is not installed."""


@dataclass(frozen=True)
class EngineSpec:
    name: str
    module: str
    driver: str
    devices: tuple[str, ...]
    env_cpu: dict = field(default_factory=dict)
    env_cuda: dict = field(default_factory=dict)

    @property
    def python(self) -> str:
        return os.environ.get(f"FK_{self.name.upper()}_PYTHON", sys.executable)

    def env(self, device: str) -> dict:
        return dict(self.env_cpu if device == "cpu" else self.env_cuda)


ENGINES = {
    "vllm": EngineSpec(
        name="vllm", module="vllm", driver="fk_adapters.engines.vllm.driver", devices=("cpu", "cuda"),
        # On CPU Triton kernels can only run interpreted; set for both runs of a pair alike.
        env_cpu={"VLLM_CPU_KVCACHE_SPACE": "1", "TRITON_INTERPRET": "1"},
    ),
}


def get(name: str) -> EngineSpec:
    if name not in ENGINES:
        raise EngineError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})")
    return ENGINES[name]


def check_installed(spec: EngineSpec) -> str:
    """The engine's version in the Python that will run it, or EngineError."""
    import subprocess

    probe = f"import importlib.metadata as m, {spec.module} as e; print(getattr(e, '__version__', '?'))"
    p = subprocess.run([spec.python, "-c", probe], capture_output=True, text=True)
    if p.returncode != 0:
        raise EngineError(f"engine {spec.name!r} is not installed for {spec.python} "
                          f"(import {spec.module} failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else '?'})")
    return p.stdout.strip()
