"""The linear-attention hosts are registered when vLLM imports their modules, not by fk's install: importing them runs
flash-linear-attention's device query, which on a GPU initialised CUDA in the forked engine core (session 48).

Real vllm-cpu classes in a subprocess (see test_layers_vllm_cpu.py); marked `engine` (imports vLLM), no engine runs."""
import importlib.util

import pytest

from tests.engines.vllm.test_layers_vllm_cpu import run_script

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

SCRIPT = '''
import json, sys
from fk_adapters.engines import after_import
from fk_adapters.engines.vllm import install
from fk_adapters.kernel import Kernel

def mine(slot):
    return Kernel(slot=slot, factory=lambda native: (lambda *a, **k: native(*a, **k)), name="mine", devices=("cpu",),
                  compile_safe=True, cuda_graph_safe=True)

LATER = sorted({m for m, *_ in install.LATER})
chosen = {s: ("p", mine(s)) for s in ("rms_norm", "gated_delta_rule", "ssd_chunk_scan", "gated_rms_norm")}
entered = install.install(chosen)
out = {"entered": entered, "imported_at_install": [m for m in LATER if m in sys.modules],
       "waiting": after_import.waiting()}
from vllm.model_executor.custom_op import op_registry_oot
out["registered_before"] = sorted(op_registry_oot)
import vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn  # as vLLM does, building Qwen3-Next
out["registered_after_qwen"] = sorted(op_registry_oot)
import vllm.model_executor.layers.mamba.mamba_mixer2
out["registered_after_mamba2"] = sorted(op_registry_oot)
out["waiting_after"] = after_import.waiting()
print("RESULT " + json.dumps(out))
'''


def test_linear_attention_hosts_wait_for_vllm_to_import_their_modules(tmp_path):
    out = run_script(tmp_path, SCRIPT)
    assert out["imported_at_install"] == []  # fk's install imported none of them
    assert out["entered"]["gated_delta_rule"] == ["QwenGatedDeltaNetAttention", "KimiGatedDeltaNetAttention"]
    assert out["entered"]["ssd_chunk_scan"] == ["MambaMixer2"] and out["entered"]["gated_rms_norm"] == [
        "Mixer2RMSNormGated"]
    assert "RMSNorm" in out["registered_before"] and "QwenGatedDeltaNetAttention" not in out["registered_before"]
    assert "QwenGatedDeltaNetAttention" in out["registered_after_qwen"]
    assert {"MambaMixer2", "Mixer2RMSNormGated"} <= set(out["registered_after_mamba2"])
    assert out["waiting_after"] == ["vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn"]
