"""The linear-attention / SSM slots in real HF transformers on CPU, through `fk run` as a user runs it: the slots'
references run every Mamba2 and Gated DeltaNet mixer (prefill and cached decode) and agree, passthrough (transformers'
own scans through the slots) agrees, fk-wrong's SSD variant fails the diff. Marked `engine` (~1 min a test)."""
import importlib.util
import os
import sys

import pytest

from tests.engines.transformers.test_transformers_cpu import fk
from tests.engines.vllm.test_linear_attention_cpu import REFERENCE, mixers_exercised

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                 reason="transformers is not installed")]

# the mixer class, its layers and its (prefill, decode) slots per tiny model
MIXERS = {"tiny-mamba2": ("Mamba2Mixer", 2, ("ssd_chunk_scan", "ssm_state_update")),
          "tiny-qwen3-next": ("Qwen3NextGatedDeltaNet", 1, ("gated_delta_rule", "gated_delta_rule_decode"))}


def _run(tmp_path, plugin, scenario, env=None):
    p, res, _ = fk(tmp_path, "run", "--plugins", plugin, "--scenario", scenario, "--correctness-only",
                   "--allow-uncovered", env=env)
    assert res is not None, p.stderr[-3000:]
    return p, res, res["scenarios"][0]


def _exercised(row, scenario):
    mixers_exercised(row, *MIXERS[scenario])


@pytest.mark.parametrize("scenario", ["tiny-mamba2", pytest.param("tiny-qwen3-next", marks=pytest.mark.slow)])
def test_the_slots_references_run_every_mixer_and_agree(tmp_path, make_plugin, scenario):
    make_plugin("la_ref", REFERENCE)
    site = str(next(p for p in sys.path if p.endswith("site")))
    p, res, row = _run(tmp_path, "la_ref", scenario,
                       env={"PYTHONPATH": site + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert row["status"] == "PASSED" and p.returncode == 0, row["failures"]
    _exercised(row, scenario)
    if scenario == "tiny-mamba2":  # the reference plugin has the gated norm too: each mixer's norm took it
        mixers_exercised(row, "MambaRMSNormGated", 2, ("gated_rms_norm",))


def test_a_scan_without_its_skip_connection_fails_the_diff(tmp_path):
    p, res, row = _run(tmp_path, "wrong-ssd", "tiny-mamba2")
    assert p.returncode == 1 and row["status"] == "INCORRECT" and res["verdict"] == "FAIL", row["failures"]
    _exercised(row, "tiny-mamba2")


@pytest.mark.parametrize("scenario", ["tiny-qwen3-next", pytest.param("tiny-mamba2", marks=pytest.mark.slow)])
def test_passthrough_runs_transformers_own_scans_through_the_slots(tmp_path, scenario):
    p, res, row = _run(tmp_path, "passthrough", scenario)
    assert row["status"] == "PASSED" and p.returncode == 0, row["failures"]
    _exercised(row, scenario)
