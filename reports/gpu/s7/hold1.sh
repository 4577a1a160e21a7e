#!/bin/bash
# Session 7, GPU hold 1 (vLLM 0.26.0 staged in /tmp/fk-site/vllm; run from the repository root on the GPU machine).
# Issue 5: the hosted fk46 architectures not yet started on a GPU (Qwen2.5-Omni and Mamba2 in vLLM, ColBERTv2 in the
# transformers host), then the Triton plugin A/B on fk46 LLMs. Issue 6: a short probe of the memory-bound decode
# scenario llama31-8b-decode (fk-slow at $PROBE_US us, 2 interleaved rounds, GPU clocks logged).
set -u
REPO=$(pwd); W=/tmp/fk-work; M=/tmp/fk-models
export PYTHONPATH=/tmp/fk-site/vllm FK_VLLM_PYTHONPATH=/tmp/fk-site/vllm FK_TRANSFORMERS_PYTHONPATH=/tmp/fk-site/vllm
export PYTHONUNBUFFERED=1
FK="python3 -m fk_adapters.cli.main"
bash reports/gpu/fk_gpu.sh vllm setup
FK46="fk46-qwen2.5-omni" bash reports/gpu/fk_gpu.sh vllm fk46
echo "=== transformers fk46-colbertv2 $(date -u +%H:%M:%S)"
(cd $W && $FK capture --engine transformers --scenario fk46-colbertv2 --profile --smoke --model-cache $M --timeout 900 \
  --out $W/fk46/transformers; rm -rf "${M:?}"/*)
FK46="fk46-mamba2" FK46_TIMEOUT=1500 bash reports/gpu/fk_gpu.sh vllm fk46
echo "=== decode probe $(date -u +%H:%M:%S)"
mkdir -p $W/probe
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 > $W/probe/gpu-clocks.csv 2>&1 & SMI=$!
(cd $W && FK_SLOW_US=${PROBE_US:-2} $FK run --plugins slow --engine vllm --scenario llama31-8b-decode --interleave 2 \
  --model-cache $M --timeout 900 --out $W/probe/slow-${PROBE_US:-2}us)
kill $SMI; rm -rf "${M:?}"/*
echo "=== decode probe done $(date -u +%H:%M:%S)"
FK46_AB=${FK46_AB:-fk46-gpt-oss fk46-llama-3.1 fk46-qwen3-vl fk46-mixtral} bash reports/gpu/fk_gpu.sh vllm fk46ab
bash reports/gpu/fk_gpu.sh vllm pack
