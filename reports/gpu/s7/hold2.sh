#!/bin/bash
# Session 7, GPU hold 2 (vLLM 0.26.0 staged in /tmp/fk-site/vllm; run from the repository root on the GPU machine).
# Issue 6, point 7: reports/deltas.sh on the memory-bound decode scenario llama31-8b-decode: interleaved A/A (the
# noise floor), fk-slow at 0 us, at $SLOW_US, at 0 us again; fk compare at --threshold 0.01. GPU clocks logged.
set -u
ROUNDS=${ROUNDS:-3} SLOW_US=${SLOW_US:-2} THRESHOLD=${THRESHOLD:-0.01} DELTA_SC=llama31-8b-decode \
  bash reports/gpu/fk_gpu.sh vllm setup deltas pack
