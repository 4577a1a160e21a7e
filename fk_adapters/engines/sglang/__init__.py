"""SGLang adapter: AROUND hooks on the ``forward_cuda`` of SGLang's layers (CUDA only).

``targets`` (pure Python) says which method hosts each slot and adapts its arguments;
``install`` registers the hooks through SGLang's HookRegistry; ``general_plugin`` is the
``sglang.srt.plugins`` entry point; ``driver`` runs one job on ``sgl.Engine``.
"""
