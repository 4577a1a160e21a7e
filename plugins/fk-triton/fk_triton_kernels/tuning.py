"""Autotuning per token-count bucket, shared by the gemm and fused MoE kernels.

A kernel's configs each carry a ``BUCKET`` constexpr; the kernel takes the call's bucket as ``M_BUCKET`` (a key of
the autotuner), and only that bucket's configs are tried: a new batch size in a seen bucket reuses the tuned config,
so no benchmarking happens inside a CUDA graph capture once the engine's warm-up has run each bucket. Interpreted
(``TRITON_INTERPRET=1``) there is one config and no pruning.
"""
from __future__ import annotations

import os

import triton

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def _this_bucket(configs, named_args, **kwargs):
    """Only the configs of the call's bucket are tried."""
    return [c for c in configs if c.kwargs["BUCKET"] == named_args["M_BUCKET"]]


def bucket_tuned(configs: list, key: list[str]):
    """``triton.autotune`` over ``configs`` keyed on ``M_BUCKET`` and ``key``, pruned to the call's bucket."""
    return triton.autotune(configs=configs, key=["M_BUCKET", *key],
                           prune_configs_by=None if INTERPRETED else {"early_config_prune": _this_bucket})
