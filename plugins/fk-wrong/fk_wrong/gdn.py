"""A deliberately wrong gated delta rule (prefill and decode): the value heads in reverse order (value head j reads
value head HV-1-j, an indexing bug of a GQA layout), states kept per slot as usual. Finite and of the right scale:
only a real numerical diff catches it. The slots' references on the flipped heads: they read lengths on the host, so
they are not safe under CUDA graphs (run it eager on a GPU). Milder bugs (beta applied twice, the decay dropped,
q/k left unnormalised) moved tiny-qwen3-next's bf16 logprobs by 0.005-0.027 on average, inside bf16's fixed bar
(0.04: the mixer's gated RMSNorm rescales its output): only fk check sees those.
"""
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks.linear_attention import gated_delta_rule, gated_delta_rule_decode


def flipped_gdn(q, k, v, g, beta, state, state_indices, cu_seqlens, has_initial_state, scale, use_qk_l2norm,
                out) -> None:
    gated_delta_rule(q, k, v.flip(1), g, beta, state, state_indices, cu_seqlens, has_initial_state, scale,
                     use_qk_l2norm, out)


def flipped_gdn_decode(q, k, v, g, beta, state, state_indices, scale, use_qk_l2norm, out) -> None:
    gated_delta_rule_decode(q, k, v.flip(1), g, beta, state, state_indices, scale, use_qk_l2norm, out)


@hookimpl
def fk_kernels(engine, device):
    common = {"devices": ("cuda", "cpu"), "cuda_graph_safe": False, "compile_safe": True,
              "description": "value heads read in reverse order"}
    return [Kernel(slot="gated_delta_rule", fn=flipped_gdn, **common),
            Kernel(slot="gated_delta_rule_decode", fn=flipped_gdn_decode, **common)]
