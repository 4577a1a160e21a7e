#!/bin/bash
# One hold of a 4-GPU machine (nvidia-h100-x4 / nvidia-h200-x4): the issue scripts side by side, each lane on its own
# GPUs (CUDA_VISIBLE_DEVICES; fk takes one lock per device set, and its GPU watcher leaves out processes on the other
# lanes' GPUs). Stage vLLM, start its lanes, stage SGLang while they run, start SGLang's. Parts of at most 24 MiB
# (`stage.py ENGINE --part-mib 24`; `bash reports/gpu/stage_extra.sh sglang` for the wheel SGLang's lock lacks):
# the working tree (~36 MiB) travels beside each part and a call carries at most 64 MiB.
#   (last vLLM part) bash reports/gpu/fk_gpu.sh vllm setup; setsid nohup bash reports/gpu/lanes_x4.sh vllm > /dev/null 2>&1 < /dev/null &
#   (last SGLang part) bash reports/gpu/fk_gpu.sh sglang setup; setsid nohup bash reports/gpu/lanes_x4.sh sglang > /dev/null 2>&1 < /dev/null &
#   bash reports/gpu/lanes_x4.sh pack        # each issue's work folder (no weights) -> $OUT, while or after they run
# A lane's log is <issue work folder>/lane-<name>.log. Keep a call in flight: an idle machine goes back after 30 s.
# vllm:
#   V-A  GPU 0     issue 29: the GPU tests of gemm / fused_moe (the MoE tiles are autotuned since session 26), both
#                  checked on session 26's fk46-mixtral capture, the Triton A/B on fk46-mixtral (compiled + graphs,
#                  float32 reference: a correct kernel's error ratios on a MoE model), passthrough against its
#                  baseline; then issue 30 on fk46-qwen3-next
#                  (capture, check, A/B, wrong-gdn, passthrough), paged_attention re-checked on the committed
#                  fk46-llama-3.1 capture, the GPU tests
#   V-C  GPUs 2,3  issue 33 at TP=2 on fk46-llama-3.1-tp2 (Triton A/B, wrong-all-reduce, passthrough, capture, check)
# sglang:
#   S-A  GPU 1     issue 29: fk46-llama-3.1 captured with --profile (coverage), the Triton A/B there, wrong-gemm, gemm and
#                  fused_moe checked on the committed fk46-mixtral capture; then issue 30: paged_attention and gemm
#                  checked on that llama capture, wrong-attention, wrong-gemm and passthrough against the A/B's baseline
#   S-C  GPUs 2,3  issue 33 at TP=2 in SGLang, once V-C is done
# Session 26 ran an earlier plan of this script (vLLM only; reports/gpu/s26-h200x4/README.md).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ROOT=/tmp/fk-work

lane() {  # lane NAME ISSUE ENGINE DEVICES [VAR=value ...]: runs issueNN.sh ENGINE runs with those variables
  local name=$1 issue=$2 engine=$3 devices=$4; shift 4
  local log=$ROOT/i$issue/$engine/lane-$name.log
  mkdir -p "$(dirname "$log")"
  echo "=== lane $name: issue $issue on GPUs $devices, $* ($(date -u +%H:%M:%S))" >> "$log"
  env CUDA_VISIBLE_DEVICES="$devices" "$@" bash "$HERE/issue$issue.sh" "$engine" runs >> "$log" 2>&1
}

case ${1:-} in
  vllm)
    LLAMA=$REPO/reports/gpu/issue30-h100/vllm/fk46/fk46-llama-3.1/vllm.json
    (lane V-A 29 vllm 0 STEPS="gputests check ab wrong" SC=fk46-mixtral AB_INTERLEAVE=0 WRONG=passthrough \
       WORKLOAD="$REPO/reports/gpu/s26-h200x4/i29/fk46/fk46-mixtral/vllm.json"
     lane V-A 30 vllm 0 STEPS="linear check gputests" LINEAR=fk46-qwen3-next WORKLOAD="$LLAMA" GPUTESTS_S=300) &
    lane V-C 33 vllm 2,3 STEPS="triton wrong pass capture check" SCENARIOS=fk46-llama-3.1-tp2 ROUNDS=0 &
    wait ;;
  sglang)
    MIXTRAL=$REPO/reports/gpu/issue29-h100/sglang/fk46/fk46-mixtral/sglang.json
    (lane S-A 29 sglang 1 STEPS="capture ab wrong check" SC=fk46-llama-3.1 CAPTURE=fk46-llama-3.1 AB_INTERLEAVE=0 \
       WRONG=wrong-gemm WORKLOAD="$MIXTRAL"
     lane S-A 30 sglang 1 STEPS="check wrong pass" SC=fk46-llama-3.1 AB_DIR=$ROOT/i29/sglang/ab-triton \
       WORKLOAD=$ROOT/i29/sglang/fk46/fk46-llama-3.1/sglang.json) &
    (while pgrep -f "issue33.sh vllm" > /dev/null; do sleep 10; done  # the TP GPUs are vLLM's until its lane ends
     lane S-C 33 sglang 2,3 STEPS="triton wrong pass capture check" SCENARIOS=fk46-llama-3.1-tp2 ROUNDS=0) &
    wait ;;
  pack)
    for issue in 29 30 31 33; do
      for engine in vllm sglang; do
        [ -d "$ROOT/i$issue/$engine" ] && (. "$HERE/hold_env.sh" "i$issue" "$engine" && hold_pack > /dev/null)
      done
    done
    ls -la "${OUT:?}"
    tail -n 3 "$ROOT"/i*/*/lane-*.log ;;
  *) echo "usage: lanes_x4.sh vllm|sglang|pack"; exit 2 ;;
esac
