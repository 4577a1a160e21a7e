"""An engine-own kernel (passthrough) follows vLLM's compiled mode: its calls stay on the compiled forward_native
(gemm: on stock's F.linear, which Inductor sees), counted per trace; any other kernel, and every kernel in a build
that runs the custom ops (gemm: that compiles nothing with Inductor), goes through fk's op. An engine-own fused_moe
stays on stock's method in every build.

Real vllm-cpu classes in a subprocess (see test_layers_vllm_cpu.py); marked `engine` (imports vLLM), no engine runs."""
import importlib.util

import pytest

from tests.engines.vllm.test_layers_vllm_cpu import run_script

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

SCRIPT = '''
import json
import torch
import vllm.model_executor.parameter as parameter
from vllm.config import CompilationConfig, CompilationMode, VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.activation import SiluAndMul
from vllm.model_executor.layers.layernorm import RMSNorm
from fk_adapters import ops, probe
from fk_adapters.engines.vllm import install, layers
from fk_adapters.engines.vllm.natives import NATIVES
from fk_adapters.kernel import Kernel
from fk_adapters.tasks import SLOTS

def own(slot):
    return Kernel(slot=slot, factory=lambda native: native, name=f"engine:{slot}", devices=("cpu",),
                  cuda_graph_safe=True, compile_safe=True)

def counted(native):  # not the native itself: a kernel of its own
    return lambda *a: native(*a)

chosen = {s: ("passthrough", own(s))
          for s in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "gemm", "fused_moe")}
chosen["rms_norm"] = ("other", Kernel(slot="rms_norm", factory=counted, name="mine", devices=("cpu",),
                                      compile_safe=True, cuda_graph_safe=True))
install.install(chosen)
out = {"native_path": dict(layers.NATIVE_PATH)}
parameter.get_tensor_model_parallel_rank = lambda: 0  # no process group: one rank
parameter.get_tensor_model_parallel_world_size = lambda: 1

x, res, t = torch.randn(4, 64), torch.randn(4, 64), torch.randn(4, 128)
torch.set_grad_enabled(False)
for name, config in (("compiled", VllmConfig()),
                     ("custom_ops", VllmConfig(compilation_config=CompilationConfig(custom_ops=["all"]))),
                     ("no_inductor", VllmConfig(compilation_config=CompilationConfig(mode=CompilationMode.NONE)))):
    probe.calls.clear(); probe.native_path.clear()
    torch._dynamo.reset()  # the lambda's code is the same each round: no graph (or weights) kept from the last
    with set_current_vllm_config(config):
        norm, act = RMSNorm(64), SiluAndMul()  # the registered replacements
        lin = ReplicatedLinear(64, 1, bias=False, disable_tp=True)  # a gate's N=1 matmul
        torch.nn.init.normal_(lin.weight)
        lin.quant_method.process_weights_after_loading(lin)
        want = norm.forward_native(x.clone(), res.clone())  # the in-tree forwards (not overridden)
        fn = torch.compile(lambda a, r, t, b: (norm(a, r), act(t), norm(t[:, :64]), lin(b)[0]), fullgraph=True,
                           backend="aot_eager")
        for _ in range(2):  # (a and r: fused_add_rms_norm's own kernel writes them in place)
            (y, r2), z, plain, g = fn(x.clone(), res.clone(), t, x)
        out[name] = {"classes": [type(norm).__name__, type(act).__name__, type(lin.quant_method).__name__],
                     "native": sorted(norm._fk_native | act._fk_native | ({"gemm"} if lin.quant_method._fk_native
                                                                          else set())),
                     "same": torch.allclose(y, want[0], atol=1e-5) and torch.allclose(r2, want[1], atol=1e-5),
                     "act_same": torch.allclose(z, act.forward_native(t), atol=1e-5),
                     "gemm_same": torch.allclose(g, x @ lin.weight.T, atol=1e-4),
                     "moe_native": sorted(layers.native_path_slots(("fused_moe",))),
                     "calls": dict(probe.calls), "native_path": dict(probe.native_path)}
print("RESULT " + json.dumps(out))
'''


def test_engine_own_kernels_stay_on_the_compiled_native_path_and_others_route(tmp_path):
    out = run_script(tmp_path, SCRIPT)
    # rms_norm's kernel is not own
    assert out["native_path"] == {"fused_add_rms_norm": "passthrough:fused_add_rms_norm", "gemm": "passthrough:gemm",
                                  "silu_and_mul": "passthrough:silu_and_mul", "fused_moe": "passthrough:fused_moe"}
    # fk's MoE native is not stock's call (vLLM's modular kernel): an engine-own MoE stays on stock's in every build
    assert [out[m]["moe_native"] for m in ("compiled", "custom_ops", "no_inductor")] == [["fused_moe"]] * 3
    c = out["compiled"]
    assert c["classes"] == ["FkRMSNorm", "FkSiluAndMul", "FkUnquantizedLinearMethod"]
    assert c["same"] and c["act_same"] and c["gemm_same"]
    assert c["native"] == ["fused_add_rms_norm", "gemm", "silu_and_mul"]
    assert c["native_path"] == {"passthrough:fused_add_rms_norm": 1, "passthrough:gemm": 1,
                                "passthrough:silu_and_mul": 1}  # one trace
    assert c["calls"] == {"other:rms_norm": 2}  # the non-own kernel ran through its op on both calls
    e = out["custom_ops"]  # vLLM runs its custom ops: the passthrough goes through fk's op, as in eager mode
    assert e["native"] == ["gemm"] and e["same"] and e["act_same"] and e["gemm_same"]  # Inductor still sees F.linear
    assert e["native_path"] == {"passthrough:gemm": 1}
    assert e["calls"] == {"other:rms_norm": 2, "passthrough:fused_add_rms_norm": 2, "passthrough:silu_and_mul": 2}
    n = out["no_inductor"]  # nothing compiled by Inductor: every passthrough call goes through fk's op
    assert n["native"] == [] and n["native_path"] == {} and n["gemm_same"]
    assert n["calls"] == {"other:rms_norm": 2, "passthrough:fused_add_rms_norm": 2, "passthrough:gemm": 2,
                          "passthrough:silu_and_mul": 2}
