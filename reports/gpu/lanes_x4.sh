#!/bin/bash
# One hold of a 4-GPU machine (nvidia-h100-x4 / nvidia-h200-x4): the issue scripts side by side, each lane on its own
# GPUs (CUDA_VISIBLE_DEVICES; fk takes one lock per device set, and its GPU watcher leaves out processes on the other
# lanes' GPUs). Stage vLLM, start its lanes, stage SGLang while they run, start SGLang's. A call carries at most
# 64 MiB: the working tree (`git ls-files -z | xargs -0 du -cb | tail -1`; 40 MiB at session 27's end) and one part,
# so parts of 64 - tree - 2 MiB (`stage.py ENGINE --part-mib 22`; `PART_MIB=22 bash reports/gpu/stage_extra.sh sglang`
# for the wheel SGLang's lock lacks).
#   (last vLLM part) bash reports/gpu/fk_gpu.sh vllm setup; setsid nohup bash reports/gpu/lanes_x4.sh vllm > /dev/null 2>&1 < /dev/null &
#   (last SGLang part) bash reports/gpu/fk_gpu.sh sglang setup; setsid nohup bash reports/gpu/lanes_x4.sh sglang > /dev/null 2>&1 < /dev/null &
#   bash reports/gpu/lanes_x4.sh pack        # each issue's work folder (no weights) -> $OUT, while or after they run
# A lane's log is <issue work folder>/lane-<name>.log. Keep a call in flight: an idle machine goes back after 30 s.
# vllm:
#   V-A  GPU 0     issue 29: fk-wrong's wrong-gemm on fk46-mixtral under the median rule (its own baseline);
#                  issue 30 on fk46-qwen3-next (capture, check, A/B, wrong-gdn, passthrough: session 27's capture
#                  crashed in fk's GDN seam, fixed since); issue 32: BGE-M3 and ColBERTv2 (per-token embeddings) in
#                  vLLM's pooling runner (capture, Triton A/B, wrong-gemm); issue 31: the adapter's cost (A/A, then
#                  passthrough, $ROUNDS interleaved rounds), compiled, on llama31-8b-decode
#   V-D  GPU 1     the GPU tests of the Triton gemm / MoE (session 27 changed their tiles and the MoE's sort) and paged
#                  attention (now one KV read per GQA group), while SGLang stages
#   V-E  GPU 2     paged_attention and gemm checked on the committed fk46-llama-3.1 capture (session 25: attention 0.29x
#                  FlashAttention), while SGLang stages
# sglang:
#   S-C  GPUs 2,3  issue 33 at TP=2 in SGLang (Triton A/B, wrong-all-reduce, passthrough, capture, check), first (its
#                  bar waits on it), once V-E is done; vLLM's TP=2 evidence is session 27's
#   S-A  GPU 1     once V-D is done: issue 29 on fk46-mixtral: the Triton A/B, then wrong-moe, wrong-gemm and
#                  passthrough against its baseline (correctness only); fk46-qwen3-next captured; issue 31: the
#                  adapter's cost in SGLang's default mode, llama31-8b-decode
# Sessions 26 and 27 ran earlier plans of this script (reports/gpu/s26-h200x4/README.md, s27-h100x4/README.md).
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
    (lane V-A 29 vllm 0 STEPS="wrong" SC=fk46-mixtral WRONG=wrong-gemm
     lane V-A 30 vllm 0 STEPS="linear" LINEAR=fk46-qwen3-next
     lane V-A 32 vllm 0 STEPS="pooling"
     lane V-A 31 vllm 0 STEPS="adapter" ADAPTER_SC=llama31-8b-decode) &
    (lane V-D 29 vllm 1 STEPS="gputests" GPUTESTS_K="test_triton_gemm_moe"
     lane V-D 30 vllm 1 STEPS="gputests" GPUTESTS_K="test_triton_attention"; touch "$ROOT/V-D.done") &
    (lane V-E 30 vllm 2 STEPS="check" WORKLOAD="$LLAMA"; touch "$ROOT/V-E.done") &
    wait ;;
  sglang)
    (while [ ! -e "$ROOT/V-E.done" ]; do sleep 10; done  # GPU 2: vLLM's check first
     lane S-C 33 sglang 2,3 STEPS="triton wrong pass capture check" SCENARIOS=fk46-llama-3.1-tp2 ROUNDS=0) &
    (while [ ! -e "$ROOT/V-D.done" ]; do sleep 10; done  # GPU 1: vLLM's GPU tests first
     lane S-A 29 sglang 1 STEPS="ab wrong" SC=fk46-mixtral AB_INTERLEAVE=0 WRONG="wrong-moe wrong-gemm passthrough"
     lane S-A 29 sglang 1 STEPS="capture" CAPTURE=fk46-qwen3-next
     lane S-A 31 sglang 1 STEPS="adapter" ADAPTER_SC=llama31-8b-decode) &
    wait ;;
  pack)
    for issue in 29 30 31 32 33; do
      for engine in vllm sglang; do
        [ -d "$ROOT/i$issue/$engine" ] && (. "$HERE/hold_env.sh" "i$issue" "$engine" && hold_pack > /dev/null)
      done
    done
    ls -la "${OUT:?}"
    tail -n 3 "$ROOT"/i*/*/lane-*.log ;;
  *) echo "usage: lanes_x4.sh vllm|sglang|pack"; exit 2 ;;
esac
