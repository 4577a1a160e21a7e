"""The slot catalog: every slot's interface, reference semantics and engine entries.

Installed as ``fk_adapters.tasks``. ``SLOTS`` maps a slot name to its :class:`Slot`.
"""
from fk_adapters.tasks.activations import GELU_AND_MUL, SILU_AND_MUL
from fk_adapters.tasks.attention import PAGED_ATTENTION
from fk_adapters.tasks.collective import ALL_REDUCE
from fk_adapters.tasks.conv import CONV2D
from fk_adapters.tasks.gemm import GEMM
from fk_adapters.tasks.linear_attention import (
                                               GATED_DELTA_RULE,
                                               GATED_DELTA_RULE_DECODE,
                                               SSD_CHUNK_SCAN,
                                               SSM_STATE_UPDATE,
)
from fk_adapters.tasks.moe import FUSED_MOE
from fk_adapters.tasks.norms import FUSED_ADD_RMS_NORM, GATED_RMS_NORM, LAYER_NORM, RMS_NORM
from fk_adapters.tasks.rotary import ROTARY_EMBEDDING
from fk_adapters.tasks.sdpa import SDPA
from fk_adapters.tasks.slot import Slot

SLOTS: dict[str, Slot] = {s.name: s for s in (RMS_NORM, FUSED_ADD_RMS_NORM, SILU_AND_MUL, GELU_AND_MUL,
                                              ROTARY_EMBEDDING, GEMM, FUSED_MOE, PAGED_ATTENTION,
                                              GATED_DELTA_RULE, GATED_DELTA_RULE_DECODE, SSD_CHUNK_SCAN,
                                              SSM_STATE_UPDATE, GATED_RMS_NORM, LAYER_NORM, CONV2D, SDPA,
                                              ALL_REDUCE)}

__all__ = ["SLOTS", "Slot"]
