"""A deliberately wrong paged_attention: the softmax temperature off by 10% (scores scaled by 1.1 x scale), as a
kernel that takes the scale from the wrong head size would be. Finite, of the right scale, every row slightly off:
only a real numerical diff catches it. Not offered until the slot joins the catalog (issue 30's engine entries).
"""
from fk_adapters.tasks.attention import paged_attention

SCALE_ERROR = 1.1


def hot_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, max_query_len, scale, window_left,
                  softcap, out) -> None:
    paged_attention(q, k_cache, v_cache, block_table, seq_lens, query_start_loc, max_query_len, scale * SCALE_ERROR,
                    window_left, softcap, out)
