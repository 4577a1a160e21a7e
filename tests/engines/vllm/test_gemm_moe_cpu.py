"""gemm and fused_moe in real vLLM on CPU (vllm-cpu): the slots' references run the model, a wrong MoE fails the
diff, capture records both. Marked `engine` (minutes); vLLM runs in subprocesses (see test_vllm_cpu.py)."""
import importlib.util
import json
import os
import sys

import pytest

from tests.engines.vllm.test_layers_vllm_cpu import run_script
from tests.engines.vllm.test_vllm_cpu import fk_capture, fk_run

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

REFERENCES = """
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks import SLOTS

DROP_EXPERT_0 = {drop}

def gemm(x, weight, bias):
    return SLOTS["gemm"].reference(x, weight, bias)

def fused_moe(x, w13, w2, topk_weights, topk_ids, *rest):
    if DROP_EXPERT_0:  # wrong: expert 0's contribution is lost
        topk_weights = topk_weights.masked_fill(topk_ids == 0, 0.0)
    return SLOTS["fused_moe"].reference(x, w13, w2, topk_weights, topk_ids, *rest)

@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="gemm", fn=gemm, devices=("cpu",)), Kernel(slot="fused_moe", fn=fused_moe, devices=("cpu",))]
"""


def _plugin_env(make_plugin, name, drop):
    make_plugin(name, REFERENCES.format(drop=drop))
    site = str(next(p for p in sys.path if p.endswith("site")))
    return {"PYTHONPATH": site + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_the_slots_references_run_the_model_and_agree(tmp_path, make_plugin):
    env = _plugin_env(make_plugin, "refs", False)
    p, res = fk_run(tmp_path, "--plugins", "refs", "--scenario", "tiny-mixtral", "--scenario", "tiny-llama",
                    "--no-multiprocessing", "--quick", "--allow-uncovered", env=env)
    assert res is not None, p.stderr[-3000:]
    by = {r["scenario"]: r for r in res["scenarios"]}
    for name, slots in (("tiny-mixtral", ("gemm", "fused_moe")), ("tiny-llama", ("gemm",))):
        row = by[name]
        assert row["status"] == "PASSED", (name, row["failures"])
        for slot in slots:
            ev = row["evidence"]["slots"][slot]
            assert ev["status"] == "exercised" and ev["calls"] > 0 and ev["layers"] > 0, (name, slot, ev)
    assert by["tiny-llama"]["evidence"]["slots"]["fused_moe"]["status"] == "n/a"  # a dense model: no MoE layer
    assert p.returncode == 0 and res["verdict"] == "PASS", p.stdout[-3000:]


def test_a_moe_that_drops_expert_0_fails_the_diff(tmp_path, make_plugin):
    env = _plugin_env(make_plugin, "dropper", True)
    p, res = fk_run(tmp_path, "--plugins", "dropper", "--scenario", "tiny-mixtral", "--no-multiprocessing",
                    "--quick", "--allow-uncovered", env=env)
    assert res is not None, p.stderr[-3000:]
    row = res["scenarios"][0]
    assert p.returncode == 1 and row["status"] == "INCORRECT" and res["verdict"] == "FAIL", row["failures"]
    assert row["evidence"]["slots"]["fused_moe"]["calls"] > 0
    assert row["correctness"]["teacher_forced"]["max_abs"] > res["thresholds"]["float32"]["max_abs"]


@pytest.mark.slow
def test_capture_records_gemm_and_fused_moe(tmp_path):
    p, out = fk_capture(tmp_path, "--engine", "vllm", "--scenario", "tiny-mixtral", "--quick")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    wl = json.loads((out / "tiny-mixtral" / "vllm.json").read_text())
    gemm, moe = wl["slots"]["gemm"], wl["slots"]["fused_moe"]
    assert all(r["calls"] > 0 for r in gemm + moe)
    # tiny-mixtral: hidden 128, 4 heads + 2 kv heads of 32 (qkv N 256), 4 experts of intermediate 128, top-2;
    # the lm_head's vocab padded to 1024
    assert {tuple(r["args"][1]["shape"]) for r in gemm} == {(256, 128), (128, 128), (1024, 128)}
    assert all(r["args"][0]["shape"][1] == 128 and r["args"][2] is None for r in gemm)
    for r in moe:
        x, w13, w2, tw, ti, act, on_input, b13, b2, alpha, limit, scale = r["args"]
        assert (w13["shape"], w2["shape"], act, on_input, b13, b2, scale) == (
            [4, 256, 128], [4, 128, 128], {"value": "silu"}, {"value": False}, None, None, {"value": 1.0})
        assert tw["shape"] == ti["shape"] == [x["shape"][0], 2] and ti["dtype"] == "int32"
    assert {1, 4} & {r["args"][0]["shape"][0] for r in moe}  # decode steps of the quick run


NATIVES_SCRIPT = '''
import json
import torch
import vllm._custom_ops  # noqa: F401  (registers torch.ops._C)
from fk_adapters.engines.vllm import natives
from fk_adapters.tasks import SLOTS

g, out = torch.Generator().manual_seed(0), {}
x, w, b = torch.randn(5, 96, generator=g), torch.randn(48, 96, generator=g) / 10, torch.randn(48, generator=g)
for bias in (None, b):
    got, want = natives.gemm(x, w, bias), SLOTS["gemm"].reference(x, w, bias)
    out[f"gemm bias={bias is not None}"] = (got - want).abs().max().item()
E, H, I, T = 4, 64, 40, 6  # I = 40: vLLM's CPU experts pad it to a multiple of 32 first
w13, w2 = torch.randn(E, 2 * I, H, generator=g) / 8, torch.randn(E, H, I, generator=g) / 8
b13, b2 = torch.randn(E, 2 * I, generator=g) / 8, torch.randn(E, H, generator=g) / 8
x = torch.randn(T, H, generator=g)
for k, on_input, biases in ((2, False, (None, None)), (2, False, (b13, b2)), (1, True, (None, None))):
    tw = torch.rand(T, k, generator=g)
    ti = torch.randint(0, E, (T, k), generator=g, dtype=torch.int32)
    args = (x, w13, w2, tw, ti, "silu", on_input, *biases, 1.702, 7.0, 0.5)
    got, want = natives.fused_moe(*args), SLOTS["fused_moe"].reference(*args)
    out[f"fused_moe k={k} on_input={on_input} bias={biases[0] is not None}"] = (got - want).abs().max().item()
w13[0] += 1  # written to: the native packs it again
args = (x, w13, w2, tw, ti, "silu", True, None, None, 1.702, 7.0, 1.0)
out["fused_moe after a write"] = (natives.fused_moe(*args) - SLOTS["fused_moe"].reference(*args)).abs().max().item()
print("RESULT " + json.dumps(out))
'''


def test_the_cpu_natives_compute_the_slots_on_any_weight(tmp_path):
    """What passthrough and fk check run outside a model: vLLM's CPU GEMM handle and its padded, prepacked MoE."""
    diffs = run_script(tmp_path, NATIVES_SCRIPT)
    assert len(diffs) == 6 and all(d < 1e-4 for d in diffs.values()), diffs


@pytest.mark.slow
def test_passthrough_gemm_and_fused_moe_are_the_engines_own(tmp_path):
    """fk-passthrough routes the GEMMs to vLLM's own CPU kernel, on the packed state the engine built at load, and
    leaves the MoE on stock's own method (fk's native calls the experts another way: session 58's H100 ran four
    extra kernels a MoE layer a step through it), counted."""
    p, res = fk_run(tmp_path, "--plugins", "passthrough", "--scenario", "tiny-mixtral", "--no-multiprocessing",
                    "--quick", "--allow-uncovered")
    assert res is not None, p.stderr[-3000:]
    row = res["scenarios"][0]
    assert row["status"] == "PASSED", row["failures"]
    assert row["correctness"]["tokens"]["identical"] == row["correctness"]["tokens"]["requests"]
    assert row["correctness"]["teacher_forced"]["max_abs"] < 1e-5
    slots = row["evidence"]["slots"]
    assert slots["gemm"]["calls"] > 0
    moe = slots["fused_moe"]
    assert moe["status"] == "exercised" and moe["native_path"] > 0 and moe["calls"] == 0, moe
