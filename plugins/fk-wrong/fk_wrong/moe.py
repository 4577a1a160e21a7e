"""A deliberately wrong fused_moe: the last of each token's top-k choices contributes nothing (k > 1).

Every expert runs on every token, weighted by a dense [T, E] routing matrix that misses each token's last choice:
static shapes, no host sync, so it runs under CUDA graphs (slow: E times the tokens' work; meant for small E).
The output stays finite and of the right order (the first choices carry most of the router weight), so only a
real numerical diff catches it. Top-1 models are unharmed.
"""
import torch

from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks.moe import _act


def last_choice_dropped_moe(x, w13, w2, topk_weights, topk_ids, activation, apply_router_weight_on_input, w13_bias,
                            w2_bias, alpha, limit, routed_scaling_factor):
    experts = w13.shape[0]
    ids, weights = topk_ids.long(), topk_weights.float()
    if ids.shape[-1] > 1:
        ids, weights = ids[:, :-1], weights[:, :-1]
    ids = torch.where((ids >= 0) & (ids < experts), ids, experts)  # ids outside [0, E) into a dropped column
    dense = x.new_zeros(x.shape[0], experts + 1, dtype=torch.float32).scatter_add_(1, ids, weights)[:, :experts]
    xf, out = x.float(), x.new_zeros(x.shape, dtype=torch.float32)
    for e in range(experts):
        w = dense[:, e:e + 1]
        h = xf * w if apply_router_weight_on_input else xf
        g = h @ w13[e].float().T + (0 if w13_bias is None else w13_bias[e].float())
        o = _act(g, activation, alpha, limit) @ w2[e].float().T + (0 if w2_bias is None else w2_bias[e].float())
        out += o * (w != 0) if apply_router_weight_on_input else o * w
    return (out * routed_scaling_factor).to(x.dtype)


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="fused_moe", fn=last_choice_dropped_moe, devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, description="drops the last top-k choice of every token")]
