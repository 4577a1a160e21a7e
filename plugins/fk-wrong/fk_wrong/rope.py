"""A deliberately wrong kernel: rotary embedding that treats every call as neox style (ignores ``is_neox``).

Exact on neox-style models (Llama, Qwen2, Gemma, ...), wrong on GPT-J-style ones (GLM-4, GPT-J, Cohere), where
it pairs channel i with i + rotary_dim/2 instead of 2i with 2i+1: only a scenario with GPT-J-style rotary
(``tiny-glm4``) catches it.
"""
from fk_adapters import Kernel, hookimpl
from fk_adapters.tasks.rotary import rotary_embedding


def neox_only_rotary(positions, query, key, head_size, cos_sin_cache, is_neox):
    rotary_embedding(positions, query, key, head_size, cos_sin_cache, True)


@hookimpl
def fk_kernels(engine, device):
    return [Kernel(slot="rotary_embedding", fn=neox_only_rotary, devices=("cuda", "cpu"), cuda_graph_safe=True,
                   compile_safe=True, description="ignores is_neox: every call neox style")]
