#!/bin/bash
# One hold of a 4-GPU machine (nvidia-h100-x4 / nvidia-h200-x4) with vLLM 0.26.0 staged: the issue scripts run side
# by side, each in its own lane of GPUs (CUDA_VISIBLE_DEVICES; fk takes one lock per device set, and its GPU watcher
# leaves out processes on the other lanes' GPUs). After ../shared/device/stage.py vllm and its install:
#   bash reports/gpu/fk_gpu.sh vllm setup
#   setsid nohup bash reports/gpu/lanes_x4.sh start > /tmp/fk-work/lanes.log 2>&1 < /dev/null &
#   bash reports/gpu/lanes_x4.sh pack        # each issue's work folder (no weights) -> $OUT, while or after they run
# Lanes (each a queue; a lane's log is <issue work folder>/lane-<name>.log):
#   A  GPU 0     issue 29: fk46-mixtral captured with --profile (coverage), gemm / fused_moe checked on its shapes,
#                wrong-gemm and wrong-moe there (correctness only); wrong-gemm on fk46-llama-3.1; fk-vllm-moe in the
#                transformers host
#   B  GPU 1     issue 30: the linear-attention / SSM slots on fk46-mamba2 and fk46-qwen3-next (capture, check,
#                Triton A/B, wrong, passthrough); paged_attention and gemm checked again on the committed
#                fk46-llama-3.1 capture; the GPU tests of the new slots
#   C  GPUs 2,3  issue 33 at TP=2 on fk46-llama-3.1-tp2 (Triton A/B, wrong-all-reduce, passthrough, capture, check);
#                then issue 31's adapter cost, decode on GPU 2 and prefill on GPU 3, side by side
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=/tmp/fk-work

lane() {  # lane NAME ISSUE DEVICES [VAR=value ...] -- runs issueNN.sh vllm runs with those variables
  local name=$1 issue=$2 devices=$3; shift 3
  local log=$ROOT/i$issue/vllm/lane-$name.log
  mkdir -p "$(dirname "$log")"
  echo "=== lane $name: issue $issue on GPUs $devices, $* ($(date -u +%H:%M:%S))" >> "$log"
  env CUDA_VISIBLE_DEVICES="$devices" "$@" bash "$HERE/issue$issue.sh" vllm runs >> "$log" 2>&1
}

case ${1:-} in
  start)
    LLAMA_CAPTURE=$(cd "$HERE/../.." && pwd)/reports/gpu/issue30-h100/vllm/fk46/fk46-llama-3.1/vllm.json
    (lane A1 29 0 STEPS="capture check wrong" CAPTURE=fk46-mixtral WRONG="wrong-gemm wrong-moe"
     lane A2 29 0 STEPS="wrong tfx" SC=fk46-llama-3.1 WRONG=wrong-gemm) &
    (lane B 30 1 STEPS="linear check gputests" LINEAR="fk46-mamba2 fk46-qwen3-next" WORKLOAD="$LLAMA_CAPTURE"
     GPUTESTS_S=300) &
    (lane C 33 2,3 STEPS="triton wrong pass capture check" SCENARIOS=fk46-llama-3.1-tp2 ROUNDS=0
     lane C-decode 31 2 STEPS=adapter ADAPTER_SC=llama31-8b-decode ROUNDS=5 &
     lane C-prefill 31 3 STEPS=adapter ADAPTER_SC=llama31-8b-4l-prefill ROUNDS=5
     wait) &
    wait
    echo "=== all lanes done $(date -u +%H:%M:%S)" ;;
  pack)
    for issue in 29 30 31 33; do
      [ -d "$ROOT/i$issue/vllm" ] && (. "$HERE/hold_env.sh" "i$issue" vllm && hold_pack > /dev/null)
    done
    ls -la "${OUT:?}"
    tail -n 3 "$ROOT"/i*/vllm/lane-*.log ;;
  *) echo "usage: lanes_x4.sh start|pack"; exit 2 ;;
esac
