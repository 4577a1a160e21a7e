"""The linear-attention / SSM slots in real vLLM on CPU (vllm-cpu): the slots' references run every Mamba2 and Gated
DeltaNet mixer (prefill and decode) and agree, vllm-cpu's own kernels through the slots agree, the passthrough leaves
the mixers on stock's path (counted),
fk-wrong's SSD and gated-norm variants fail the end-to-end diff and its GDN variant fails fk check on the captured
shapes.
Marked `engine` (about a minute a test); vLLM runs in subprocesses."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.engines.vllm.test_vllm_cpu import fk_capture, fk_run

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

REFERENCE = """
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks import SLOTS

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot=s, fn=SLOTS[s].reference, name=f"reference_{s}", devices=("cpu",))
            for s in ("gated_delta_rule", "gated_delta_rule_decode", "ssd_chunk_scan", "ssm_state_update",
                      "gated_rms_norm")]
"""
# vllm-cpu's own kernels, each wrapped (not the engine's own kernel itself): their calls go through the slots
NATIVES_WRAPPED = """
from fk_adapters import Kernel, hookimpl

def _wrapped(native):
    return lambda *args: native(*args)

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot=s, factory=_wrapped, name=f"wrapped_{s}", devices=("cpu",))
            for s in ("gated_delta_rule", "gated_delta_rule_decode", "ssd_chunk_scan", "ssm_state_update")]
"""
# the mixer class each tiny model routes, its layers, and its (prefill, decode) slots
MIXERS = {"tiny-mamba2": ("MambaMixer2", 2, ("ssd_chunk_scan", "ssm_state_update")),
          "tiny-qwen3-next": ("QwenGatedDeltaNetAttention", 1, ("gated_delta_rule", "gated_delta_rule_decode"))}


def _run(tmp_path, plugin, scenario, env=None, shared=None):
    """``fk run`` of ``plugin`` on ``scenario``; ``shared`` (the passthrough fixture's folder): its seeded models and
    its stock run of the scenario are reused (--baseline-from), one vLLM process less per test."""
    more = ["--model-cache", str(shared / "models")] if shared else []
    if shared and plugin != "passthrough":
        more += ["--baseline-from", str(shared / scenario / "out")]
    p, res = fk_run(tmp_path, "--plugins", plugin, "--scenario", scenario, "--no-multiprocessing",
                    "--correctness-only", "--allow-uncovered", *more, env=env)
    assert res is not None, p.stderr[-3000:]
    assert bool(res["scenarios"][0]["baseline"].get("reused_from")) == ("--baseline-from" in more)
    return p, res, res["scenarios"][0]


def _passes(tmp_path, make_plugin, name: str, source: str, scenario: str, shared) -> dict:
    """``fk run`` of a test plugin made from ``source`` on ``scenario`` PASSES: its results row."""
    make_plugin(name, source)
    site = str(next(p for p in sys.path if p.endswith("site")))
    p, res, row = _run(tmp_path, name, scenario,
                       env={"PYTHONPATH": site + os.pathsep + os.environ.get("PYTHONPATH", "")}, shared=shared[0])
    assert row["status"] == "PASSED" and p.returncode == 0, row["failures"]
    return row


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """passthrough on each tiny model, run once: the folder (its models and stock runs, reused by the other tests)
    and {scenario: (process, results, row)}."""
    root = tmp_path_factory.mktemp("linear")
    runs = {}
    for scenario in sorted(MIXERS):
        (root / scenario).mkdir()
        runs[scenario] = _run(root / scenario, "passthrough", scenario, shared=root)
    return root, runs


def _exercised(row, scenario, gated_norm=True):
    """The mixers' slots ran, and in tiny-mamba2 (where ``gated_norm``: the plugin has the slot) each mixer's gated
    norm (2 groups: vLLM's stock is its torch forward_native)."""
    mixers_exercised(row, *MIXERS[scenario])
    if gated_norm and scenario == "tiny-mamba2":
        mixers_exercised(row, "Mixer2RMSNormGated", 2, ("gated_rms_norm",))


def mixers_exercised(row, cls: str, layers: int, slots: tuple[str, ...]):
    """Each of the family's slots ran in every one of its ``layers`` mixers of class ``cls``."""
    for slot in slots:
        ev = row["evidence"]["slots"][slot]
        assert ev["status"] == "exercised" and ev["layers"] == layers and ev["calls"] > 0, (slot, ev)
        assert cls in " ".join(ev["entered"]), ev


@pytest.mark.parametrize("scenario", ["tiny-mamba2", pytest.param("tiny-qwen3-next", marks=pytest.mark.slow)])
def test_the_slots_references_run_every_mixer_and_agree(tmp_path, make_plugin, scenario, shared):
    row = _passes(tmp_path, make_plugin, "la_ref", REFERENCE, scenario, shared)
    _exercised(row, scenario)


def test_a_scan_without_its_skip_connection_fails_the_diff(tmp_path, shared):
    p, res, row = _run(tmp_path, "wrong-ssd", "tiny-mamba2", shared=shared[0])
    assert p.returncode == 1 and row["status"] == "INCORRECT" and res["verdict"] == "FAIL", row["failures"]
    _exercised(row, "tiny-mamba2", gated_norm=False)


def test_a_gated_norm_that_gates_after_normalizing_fails_the_diff(tmp_path, shared):
    p, res, row = _run(tmp_path, "wrong-gated-norm", "tiny-mamba2", shared=shared[0])
    assert p.returncode == 1 and row["status"] == "INCORRECT" and res["verdict"] == "FAIL", row["failures"]
    mixers_exercised(row, "Mixer2RMSNormGated", 2, ("gated_rms_norm",))


@pytest.mark.slow
def test_capture_records_the_gdn_slots_and_check_catches_wrong_value_heads(tmp_path):
    """tiny-qwen3-next's one GDN layer sits behind a gated RMSNorm: in bfloat16 end to end, wrong-gdn (value heads
    reversed) moves the logprobs by about 0.01 on average, inside the fixed bar (0.04). fk check sees it."""
    p, out = fk_capture(tmp_path, "--engine", "vllm", "--scenario", "tiny-qwen3-next", "--quick")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    wl = json.loads((out / "tiny-qwen3-next" / "vllm.json").read_text())
    for slot in ("gated_delta_rule", "gated_delta_rule_decode"):
        rows = wl["slots"][slot]
        assert rows and all(r["calls"] > 0 for r in rows)
        q, v, state = rows[0]["args"][0], rows[0]["args"][2], rows[0]["args"][5]
        assert q["shape"][1:] == [1, 128] and v["shape"][1:] == [2, 128] and state["shape"][1:] == [2, 128, 128]
    c = subprocess.run([sys.executable, "-m", "fk_adapters.cli.main", "check", "--engine", "vllm", "--plugins",
                        "passthrough,wrong-gdn", "--slots", "gated_delta_rule,gated_delta_rule_decode", "--workload",
                        str(out / "tiny-qwen3-next" / "vllm.json"), "--device", "cpu", "--max-shapes", "1", "--out",
                        str(tmp_path / "check")], capture_output=True, text=True, cwd=tmp_path, timeout=1200)
    res = json.loads((tmp_path / "check" / "results.json").read_text())
    status = {(r["plugin"], r["slot"]): r["status"] for r in res["slots"]}
    want = {("passthrough", s): "PASSED" for s in ("gated_delta_rule", "gated_delta_rule_decode")}
    want |= {("wrong-gdn", s): "INCORRECT" for s in ("gated_delta_rule", "gated_delta_rule_decode")}
    assert status == want, (c.stdout[-3000:], res["slots"])


@pytest.mark.parametrize("scenario", sorted(MIXERS))
def test_passthrough_leaves_the_mixers_on_stocks_path_counted(scenario, shared):
    p, res, row = shared[1][scenario]
    assert row["status"] == "PASSED" and p.returncode == 0, row["failures"]
    cls, layers, slots = MIXERS[scenario]
    for slot in slots:
        ev = row["evidence"]["slots"][slot]
        assert ev["status"] == "exercised" and ev["layers"] == layers, (slot, ev)
        assert ev["calls"] == 0 and ev["native_path"] > 0 and "stock runs it" in ev["proof"], (slot, ev)


@pytest.mark.parametrize("scenario", sorted(MIXERS))
def test_vllm_cpus_own_kernels_through_the_slots_agree(tmp_path, make_plugin, scenario, shared):
    row = _passes(tmp_path, make_plugin, "la_native", NATIVES_WRAPPED, scenario, shared)
    mixers_exercised(row, *MIXERS[scenario])
    for slot in MIXERS[scenario][2]:  # the natives its factory was given ran inside every call: no speedup claimed
        assert row["evidence"]["slots"][slot].get("engine_own"), row["evidence"]["slots"][slot]
