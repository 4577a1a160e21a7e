"""A deliberately wrong paged_attention: the softmax temperature off by 10% (scores scaled by 1.1 x scale), as a
kernel that takes the scale from the wrong head size would be. Finite, of the right scale, every row slightly off:
only a real numerical diff catches it. The slot's reference with the wrong scale: it reads lengths on the host, so
it is not safe under CUDA graphs (run it eager on a GPU).
"""
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks.attention import paged_attention

SCALE_ERROR = 1.1


def hot_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, max_query_len, scale, window_left,
                  softcap, out) -> None:
    paged_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, max_query_len, scale * SCALE_ERROR,
                    window_left, softcap, out)


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="paged_attention", fn=hot_attention, devices=("cuda", "cpu"), cuda_graph_safe=False,
                   compile_safe=True, description="scores scaled by 1.1 x the layer's scale")]
