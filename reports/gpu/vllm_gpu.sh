#!/bin/bash
# The vLLM steps of fk_gpu.sh (kept because reports/gpu/README.md cites this name):
#   bash reports/gpu/vllm_gpu.sh STEP [STEP ...]  ==  bash reports/gpu/fk_gpu.sh vllm STEP [STEP ...]
# The first vLLM evidence set (vllm-0.26-h100/) was made by this script's earlier, standalone version at
# commit 1a41066 (`git show 1a41066:reports/gpu/vllm_gpu.sh`), which wrote to /tmp/fk-work/<step>.
exec bash "$(dirname "$0")/fk_gpu.sh" vllm "$@"
