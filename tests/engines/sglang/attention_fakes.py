"""Stand-ins for SGLang's fa3 backend, RadixAttention layer and ForwardBatch: what the paged_attention hook reads."""
from __future__ import annotations

from types import SimpleNamespace as NS

import torch


class Pool:
    """MHATokenToKVPool's part the hook uses: per-layer [slots, Hkv, D] buffers; set_kv_buffer writes rows."""

    def __init__(self, k, v):
        self.k, self.v, self.writes = k, v, []

    def set_kv_buffer(self, layer, loc, k, v, k_scale, v_scale):
        self.writes.append(loc)
        self.k[loc] = k.view(-1, *self.k.shape[1:])
        self.v[loc] = v.view(-1, *self.v.shape[1:])

    def get_kv_buffer(self, layer_id):
        return self.k, self.v


def layer(hq, hkv, d, **kw):
    return NS(**{**dict(tp_q_head_num=hq, tp_k_head_num=hkv, head_dim=d, v_head_dim=d, scaling=d ** -0.5,
                        layer_id=0, logit_cap=0.0, sliding_window_size=-1, is_cross_attention=False,
                        attn_type=NS(value="decoder"), use_irope=False, logit_capping_method="tanh",
                        quant_method=None, k_scale=None, v_scale=None), **kw})


def backend(pool, page_table, seq_lens, query_start_loc, max_q, page_size=1, **kw):
    md = NS(page_table=page_table, cache_seqlens_int32=seq_lens, cu_seqlens_q=query_start_loc, max_seq_len_q=max_q,
            swa_out_cache_loc=None)
    return NS(**{**dict(forward_metadata=md, token_to_kv_pool=pool, page_size=page_size, use_mla=False,
                        kv_cache_dtype_str="auto", fa_skip_kv_cache=False, attn_cp_size=1,
                        is_prefill_aware_swa=False, use_sliding_window_kv_pool=False), **kw})


def batch(mode="EXTEND", **kw):
    return NS(**{**dict(forward_mode=NS(name=mode), out_cache_loc=None, spec_info=None), **kw})


def call_for_case(case_args):
    """(the backend, its forward_extend call's arguments) for one catalog case of plain layout: the case's cache as
    the pool's buffers, its metadata as the backend's, its ``out`` as the engine's output buffer; no new keys."""
    q, k_cache, v_cache, table, lens, qsl, max_q, scale, window_left, softcap, out = case_args
    nb, bs, hkv, d = k_cache.shape
    hq = q.shape[1]
    pool = Pool(k_cache.reshape(nb * bs, hkv, d), v_cache.reshape(nb * bs, hkv, v_cache.shape[-1]))
    lay = layer(hq, hkv, d, scaling=scale, sliding_window_size=window_left, logit_cap=softcap,
                v_head_dim=v_cache.shape[-1])
    return (backend(pool, table, lens, qsl, max_q, page_size=bs),
            (q.reshape(q.shape[0], -1), None, None, lay, batch(_attn_output=out.view(out.shape[0], -1))), {})


def plain(case: dict) -> bool:
    return case.get("layout", "plain") == "plain"


def simple_call(x):
    """(backend, the call after it) of a one-request extend over 3 cached keys, every known argument by position."""
    pool = Pool(torch.randn(8, 1, x.shape[-1]), torch.randn(8, 1, x.shape[-1]))
    be = backend(pool, torch.tensor([[1, 2, 3]], dtype=torch.int32), torch.tensor([3], dtype=torch.int32),
                 torch.tensor([0, x.shape[0]], dtype=torch.int32), x.shape[0])
    return be, (x, None, None, layer(1, 1, x.shape[-1]), batch(), True, None, None, None)
