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
        self._fk_walk_model()
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

    def _fk_walk_model(self) -> None:
        """Once per worker, what only the built model shows: layers built for a slot that never reach it, counted as
        left stock (``count_mla``, ``count_fused_rope``)."""
        if getattr(self, "_fk_walked", False):
            return
        self._fk_walked = True
        model = getattr(getattr(self, "model_runner", None), "model", None)
        modules = list(model.modules()) if model is not None else []
        count_mla(modules)
        count_fused_rope(modules)

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


def count_mla(modules) -> None:
    """Where this worker routes paged_attention, its model's MLA layers, as left stock: they never reach fk's backend
    (no layer of theirs is built through it)."""
    import sys

    attention = sys.modules.get("fk_adapters.engines.vllm.attention")
    if attention is None or attention.SLOT not in attention.OPS:
        return
    for module in modules:
        if type(module).__name__ in MLA_LAYERS:
            probe.layer_built((attention.SLOT,), "MLA: its own backends")


def count_fused_rope(modules) -> None:
    """Move each routed ``rotary_emb`` whose every owner applies RoPE in its own fused kernel to left stock."""
    bypassed, called = {}, set()  # {id: (the RoPE layer, its owners' fused kernels)}; ids of those an owner calls
    for module in modules:
        rope = getattr(module, "rotary_emb", None)
        if not getattr(rope, "_fk_routed", False):
            continue
        fused = {k for flag, k in FUSED_ROPE_FLAGS.items() if getattr(module, flag, False) is True}
        if fused:
            bypassed.setdefault(id(rope), (rope, set()))[1].update(fused)
        else:
            called.add(id(rope))
    for key, (rope, kernels) in bypassed.items():
        if key not in called:
            rope._fk_routed = False
            probe.layer_bypassed(("rotary_embedding",),
                                 f"the model's own fused kernel applies it: {', '.join(sorted(kernels))}")
