"""The engines fk can drive, and how to start one of their runs.

Only this table and the per-engine subpackages know engine specifics; the runner,
metrics and reports are engine-agnostic. Nothing here imports an engine: each run is a
subprocess (possibly with its own Python, ``FK_<ENGINE>_PYTHON``) that imports it.
"""
from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass, field

from fk_adapters import user_cache


class EngineError(ValueError):
    """Unknown engine, or an engine that is not installed."""


def with_pth_dirs(pythonpath: str) -> str:
    """``pythonpath`` plus the folders that the ``.pth`` files in its directories name.

    Python reads ``.pth`` files only in site directories, and a ``pip install --target`` folder is
    none: SGLang's ``cutlass`` (nvidia-cutlass-dsl) is reachable only through one.
    """
    dirs = [d for d in pythonpath.split(os.pathsep) if d]
    for d in list(dirs):
        for pth in sorted(glob.glob(os.path.join(glob.escape(d), "*.pth"))):
            with open(pth, encoding="utf-8", errors="replace") as f:
                for line in f:
                    line = line.strip()
                    if not line or line.startswith(("#", "import ", "import\t")):
                        continue
                    named = os.path.join(d, line)
                    if os.path.isdir(named) and named not in dirs:
                        dirs.append(named)
    return os.pathsep.join(dirs)


@dataclass(frozen=True)
class EngineSpec:
    name: str
    module: str
    driver: str
    devices: tuple[str, ...]
    env_cpu: dict = field(default_factory=dict)
    env_cuda: dict = field(default_factory=dict)
    cache_var: str = ""
    # Folders of a run's cache that no plugin's code can change, shared by every run (one cold start, not one each)
    shared_cache: tuple[str, ...] = ()
    # What fk's "compiled" mode means in this engine on CUDA: (torch.compile traces the ops, CUDA graphs)
    compiled_cuda: tuple[bool, bool] = (True, True)
    compiled_label: str = "torch.compile + CUDA graphs"
    natives: str = ""  # module with NATIVES: the engine's own kernel per slot, in the slot interface
    natives_setup: str = ""  # module to import first, so the engine's kernels are registered
    no_float32: str = ""  # why it cannot run a float32 reference: HF transformers makes it instead
    family_drivers: dict = field(default_factory=dict)  # a scenario family's own driver module, if not ``driver``

    def driver_for(self, family: str) -> str:
        return self.family_drivers.get(family, self.driver)

    def modes(self, mode: str, device: str) -> tuple[bool, bool]:
        """(ops traced by torch.compile, CUDA graphs captured) for an fk mode on a device."""
        if mode != "compiled":
            return False, False
        return self.compiled_cuda if device == "cuda" else (self.compiled_cuda[0], False)

    def describe_mode(self, mode: str, device: str) -> str:
        if mode != "compiled":
            return "eager (no torch.compile, no CUDA graphs)"
        return self.compiled_label if device == "cuda" or self.always_eager else "torch.compile"

    @property
    def always_eager(self) -> bool:
        """Neither traces nor captures graphs in any mode (HF transformers): fk's "compiled" runs eager there."""
        return not any(self.compiled_cuda)

    @property
    def python(self) -> str:
        return os.environ.get(f"FK_{self.name.upper()}_PYTHON", sys.executable)

    @property
    def pythonpath(self) -> str:
        """``FK_<ENGINE>_PYTHONPATH``: where this engine's packages live when engines with clashing
        dependencies share one machine (empty: the inherited PYTHONPATH), with its ``.pth`` folders."""
        return with_pth_dirs(os.environ.get(f"FK_{self.name.upper()}_PYTHONPATH", ""))

    def process_env(self) -> dict:
        """Environment of any process that imports this engine."""
        return dict(os.environ, PYTHONPATH=self.pythonpath) if self.pythonpath else dict(os.environ)

    def env(self, device: str, cache_dir: str = "") -> dict:
        """Environment for one run; ``cache_dir`` keeps compile caches apart per variant."""
        env = dict(self.env_cpu if device == "cpu" else self.env_cuda)
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        if cache_dir and self.cache_var:
            env[self.cache_var] = cache_dir
            self._link_shared_cache(cache_dir)
        return env

    def _link_shared_cache(self, cache_dir: str) -> None:
        for sub in self.shared_cache:
            shared = os.path.join(user_cache.home(), f"{self.name}-{sub}")
            os.makedirs(shared, exist_ok=True)
            os.makedirs(cache_dir, exist_ok=True)
            try:
                os.symlink(shared, os.path.join(cache_dir, sub))
            except FileExistsError:
                pass


# vLLM (torch >= 2.10) loads a warm process's compiled model from its AOT artifact without tracing it, where a
# passthrough's calls left on vLLM's compiled path are proven only by Dynamo's trace (calls.on_native_path); so no
# vLLM process of a run loads one, stock's included: in session 62 the two load paths keyed the engine's own Triton
# kernels apart (likely Inductor's pointing Triton at torch's ptxas, on the traced path only), each tuning its own
VLLM_BOTH_SIDES = {"VLLM_USE_AOT_COMPILE": "0"}

ENGINES = {
    "vllm": EngineSpec(
        name="vllm", module="vllm", driver="fk_adapters.engines.vllm.driver", devices=("cpu", "cuda"),
        # On CPU Triton kernels can only run interpreted; set for both runs of a pair alike.
        env_cpu={"VLLM_CPU_KVCACHE_SPACE": "1", "TRITON_INTERPRET": "1", **VLLM_BOTH_SIDES},
        env_cuda=VLLM_BOTH_SIDES,
        # A compiled graph cached by one variant must never be replayed by another.
        cache_var="VLLM_CACHE_ROOT",
        # Each model class's static capabilities, keyed by the hash of its source file: without them every engine
        # start inspects the class in a subprocess that imports vLLM again (about 18 s)
        shared_cache=("modelinfos",),
        natives="fk_adapters.engines.vllm.natives", natives_setup="vllm._custom_ops",
    ),
    # CUDA only (no CPU path). Only our entry point among SGLang's general plugins, in both runs of a pair.
    # SGLANG_CACHE_DIR holds its torch.compile (piecewise) cache and autotune results.
    # fk's "compiled" is SGLang's default: CUDA graphs (decode full, prefill breakable), no torch.compile
    # (--enable-torch-compile would move ops to forward_native, away from the hooks).
    "sglang": EngineSpec(name="sglang", module="sglang", driver="fk_adapters.engines.sglang.driver",
                         devices=("cuda",), env_cuda={"SGLANG_PLUGINS": "fk_adapters"}, cache_var="SGLANG_CACHE_DIR",
                         compiled_cuda=(False, True), natives="fk_adapters.engines.sglang.natives",
                         natives_setup="sgl_kernel",
                         no_float32="sgl_kernel's rmsnorm takes no float32: 'failed to dispatch data type Float', "
                                    "SGLang 0.5.15 on an H100",
                         compiled_label="CUDA graphs (SGLang default: decode full, prefill breakable), "
                                        "no torch.compile",
                         family_drivers={"diffusion": "fk_adapters.engines.sglang.diffusion_driver"}),
    # HF transformers, for architectures only it implements. Always eager (fk's "compiled" included). On CPU
    # the GPUs are hidden, so a --device cpu run on a GPU host stays on the CPU (the driver uses cuda if it sees one).
    "transformers": EngineSpec(name="transformers", module="transformers",
                               driver="fk_adapters.engines.transformers.driver", devices=("cpu", "cuda"),
                               env_cpu={"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""},
                               compiled_cuda=(False, False),
                               compiled_label="eager (transformers runs eager here: no torch.compile, no CUDA graphs)",
                               natives="fk_adapters.engines.transformers.natives"),
}
NAMES = tuple(ENGINES)  # the one list of engines fk drives: plugins' Kernel.engines and scenarios' hosts name these


def get(name: str) -> EngineSpec:
    if name not in ENGINES:
        raise EngineError(f"unknown engine {name!r} (known: {', '.join(ENGINES)})")
    return ENGINES[name]


def check_installed(spec: EngineSpec) -> str:
    """The engine's version in the Python that will run it, or EngineError."""
    import subprocess

    probe = f"import importlib.metadata as m, {spec.module} as e; print(getattr(e, '__version__', '?'))"
    p = subprocess.run([spec.python, "-c", probe], capture_output=True, text=True, env=spec.process_env())
    if p.returncode != 0:
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "?"
        raise EngineError(f"engine {spec.name!r} is not installed for {spec.python} "
                          f"(import {spec.module} failed: {last})")
    return p.stdout.strip()
