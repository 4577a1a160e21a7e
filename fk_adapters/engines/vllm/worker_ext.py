"""Worker extension (vLLM ``worker_extension_cls``): read evidence from inside the worker.

The driver calls these through ``LLM.collective_rpc("fk_...")``. They add methods only;
the worker's behaviour is unchanged, so baseline runs use the extension too.
"""
from __future__ import annotations

from fk_adapters import op_families, probe

MLA_LAYERS = ("MLAAttention",)  # vLLM's MLA layers: their own backends, never fk's paged_attention one
# {flag an attention module sets when its own fused kernel applies RoPE: that kernel} (vLLM 0.26's Qwen3-Next on
# CUDA: q/k norm + partial RoPE + output gate in one Triton kernel; its ``rotary_emb`` is built but never called)
FUSED_ROPE_FLAGS = {"use_fused_qk_norm_rope_gate": "fused_qk_rmsnorm_rope_gate"}


class FkWorkerExtension:
    def fk_probe(self) -> dict:
        self._fk_count_mla()
        self._fk_count_fused_rope()
        self._fk_rank()
        return probe.snapshot()

    @staticmethod
    def _fk_rank() -> dict:
        """This worker's tensor-parallel rank, where its group has 2+ ranks (then its evidence is judged per rank)."""
        from vllm.distributed.parallel_state import get_tp_group

        tp = get_tp_group()
        if tp.world_size > 1:
            probe.set_rank(tp.rank_in_group, tp.world_size)
        return dict(probe.rank)

    def _fk_count_mla(self) -> None:
        """Where this worker routes paged_attention, count its model's MLA layers once, as left stock: they never
        reach fk's backend (no layer of theirs is built through it)."""
        import sys

        attention = sys.modules.get("fk_adapters.engines.vllm.attention")
        if getattr(self, "_fk_mla_counted", False) or attention is None or attention.SLOT not in attention.OPS:
            return
        self._fk_mla_counted = True
        model = getattr(getattr(self, "model_runner", None), "model", None)
        for module in model.modules() if model is not None else ():
            if type(module).__name__ in MLA_LAYERS:
                probe.layer_built((attention.SLOT,), "MLA: its own backends")

    def _fk_count_fused_rope(self) -> None:
        """Once per worker: a routed RoPE layer that only modules with their own fused RoPE kernel own moves from
        the built layers to left stock (it never runs, so the slot is not applicable rather than unexercised)."""
        if getattr(self, "_fk_fused_rope_counted", False):
            return
        self._fk_fused_rope_counted = True
        model = getattr(getattr(self, "model_runner", None), "model", None)
        count_fused_rope(model.modules() if model is not None else ())

    def fk_probe_reset(self) -> None:
        probe.reset_calls()

    def fk_profile_start(self) -> None:
        import torch

        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        self._fk_prof = torch.profiler.profile(activities=acts)
        self._fk_prof.start()

    def fk_profile_stop(self) -> dict:
        """Device kernel names seen since fk_profile_start, with their counts and device microseconds."""
        import torch

        prof = self._fk_prof
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        prof.stop()
        self._fk_prof = None
        return {"pid": __import__("os").getpid(), **self._fk_rank(), **op_families.kernel_profile(prof)}


def count_fused_rope(modules) -> None:
    """Move each routed ``rotary_emb`` whose every owner applies RoPE in its own fused kernel to left stock."""
    ropes: dict[int, tuple] = {}  # {id: (layer, kernels of the owners that bypass it, an owner calls it)}
    for module in modules:
        rope = getattr(module, "rotary_emb", None)
        if not getattr(rope, "_fk_routed", False):
            continue
        fused = [k for flag, k in FUSED_ROPE_FLAGS.items() if getattr(module, flag, False) is True]
        layer, kernels, called = ropes.get(id(rope), (rope, set(), False))
        ropes[id(rope)] = (layer, kernels | set(fused), called or not fused)
    for layer, kernels, called in ropes.values():
        if kernels and not called:
            layer._fk_routed = False
            probe.layer_bypassed(("rotary_embedding",),
                                 f"the model's own fused kernel applies it: {', '.join(sorted(kernels))}")
