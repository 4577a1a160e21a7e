"""GPT-J-style rotary through the slot: a kernel that ignores ``is_neox`` must fail a scenario, not pass them all.

Every other tiny model (Llama, Qwen2, Gemma, ...) is neox style; vLLM's Glm4Attention builds its rotary with
is_neox_style=False, so ``tiny-glm4`` (in the ``tiny`` suite) is the scenario that catches fk-wrong's ``wrong-rope``
(every call treated as neox style). The Triton plugin passing on it is asserted by test_vllm_cpu.py's tiny-suite run.
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from fk_adapters import scenarios
from fk_adapters.tasks import SLOTS

# vLLM 0.32 model classes that build their rotary with is_neox_style=False (vllm/model_executor/models/: glm4.py,
# gpt_j.py, commandr.py)
GPT_J_STYLE = {"Glm4ForCausalLM", "GPTJForCausalLM", "CohereForCausalLM"}


def test_the_tiny_suite_holds_a_gpt_j_style_rotary_model():
    """Without one, a rotary kernel that ignores is_neox passes `make demo` (the engine test below shows that
    tiny-glm4 is the one that catches it)."""
    assert {s.model["architectures"][0] for s in scenarios.load_suite("tiny")} & GPT_J_STYLE


@pytest.mark.parametrize("case", range(len(SLOTS["rotary_embedding"].cases)))
def test_wrong_rope_is_exact_for_neox_calls_only(case):
    from fk_wrong.rope import neox_only_rotary

    slot = SLOTS["rotary_embedding"]
    args = slot.make_inputs(slot.cases[case], torch.float32, "cpu", torch.Generator().manual_seed(case))
    mine = [a.clone() if torch.is_tensor(a) else a for a in args]
    slot.reference(*args)
    neox_only_rotary(*mine)
    same = torch.equal(mine[1], args[1]) and torch.equal(mine[2], args[2])
    assert same == slot.cases[case]["is_neox"]


def fk_run(tmp_path, *args):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "run", "--out", str(out), "--model-cache",
           str(tmp_path / "models"), *args]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=1500)
    return p, json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None


# Do not import vllm in the test process: it rewires triton for this host (breaks interpreted kernels).
@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_a_rotary_kernel_ignoring_is_neox_fails_the_gpt_j_style_scenario_only(tmp_path):
    p, res = fk_run(tmp_path, "--plugins", "wrong-rope", "--scenario", "tiny-glm4", "--scenario", "tiny-llama",
                    "--no-multiprocessing", "--smoke")
    assert res is not None, (p.stdout[-3000:], p.stderr[-3000:])
    by = {row["scenario"]: row for row in res["scenarios"]}
    limit = res["thresholds"]["float32"]["max_abs"]
    assert p.returncode == 1 and res["verdict"] == "FAIL", (p.stdout[-3000:], p.stderr[-3000:])
    for name, row in by.items():
        assert row["evidence"]["slots"]["rotary_embedding"]["calls"] > 0, name  # it ran in both
    glm4, llama = by["tiny-glm4"], by["tiny-llama"]
    assert glm4["status"] == "INCORRECT", glm4["failures"]
    assert glm4["correctness"]["teacher_forced"]["max_abs"] > 10 * limit  # far out, not a near miss
    assert llama["status"] == "PASSED", llama["failures"]  # neox style: exact, so no neox scenario could catch it
    tokens = llama["correctness"]["tokens"]
    assert tokens["identical"] == tokens["requests"] and llama["correctness"]["teacher_forced"]["max_abs"] < limit
