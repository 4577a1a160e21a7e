#!/bin/bash
# One hold of a 4-GPU machine (nvidia-h100-x4 / nvidia-h200-x4): the issue scripts side by side, each lane on its own
# GPUs (CUDA_VISIBLE_DEVICES; fk takes one lock per device set, and its GPU watcher leaves out processes on the other
# lanes' GPUs). Stage vLLM, start its lanes, stage SGLang while they run, start SGLang's. A call carries at most
# 64 MiB: the working tree and one part. `bash reports/gpu/slim_tree.sh on` first (the tree is then the code, ~4 MiB)
# allows parts of 56 MiB (`stage.py ENGINE`; `PART_MIB=56 bash reports/gpu/stage_extra.sh sglang` for the wheel SGLang's
# lock lacks): vLLM 7 calls, SGLang 15 + 2, about 4 s each (session 31; with the whole tree, 22 MiB parts: 17 and 42).
# Start the lanes from a copy: `mkdir -p /tmp/fk-repo && tar --exclude=./.stage -cf - . | tar -xf - -C /tmp/fk-repo
# && cd /tmp/fk-repo && ...`, and poll from there. `slim_tree.sh off` once the hold is over, before any commit.
#   (last vLLM part) bash reports/gpu/fk_gpu.sh vllm setup; setsid nohup bash reports/gpu/lanes_x4.sh vllm > /dev/null 2>&1 < /dev/null &
#   (last SGLang part) bash reports/gpu/fk_gpu.sh sglang setup; setsid nohup bash reports/gpu/lanes_x4.sh sglang > /dev/null 2>&1 < /dev/null &
#   bash reports/gpu/lanes_x4.sh pack        # each issue's work folder (no weights) -> $OUT, while or after they run
# A lane's log is <issue work folder>/lane-<name>.log. Keep a call in flight: an idle machine goes back after 30 s,
# with everything on it (session 30 lost 18 minutes of results so; session 40 its whole 4-GPU hold; session 54 its first
# hold, polled from outside the calls). Poll with `bash reports/gpu/lanes_x4.sh wait 560; bash reports/gpu/lanes_x4.sh
# pack` as one call (the wait sleeps on the machine until the lanes end or the seconds pass) and send the next poll at
# once: each poll brings back what is done so far. Never batch another tool's long call with a poll.
# transformers (no engine to stage: reports/gpu/extra-transformers.txt's parts, then `fk_gpu.sh transformers setup`):
#   T-A  GPU 2     first of all: issue 32's newly hosted architectures (Pi0, MobileNetV4, EfficientNetV2, SDXL, FLUX.1-dev, HunyuanVideo-1.5,
#                  LightGCN): capture, Triton A/B, wrong-gemm, passthrough; SGLang's lanes wait for it
# vllm:
#   V-D  GPU 3     first, while SGLang stages: the GPU tests of the new gated_rms_norm slot (Triton in half precision,
#                  under a CUDA graph, its profiler name; vLLM's native) and the declared kernel names of every slot
#   V-A  GPU 0     issue 30 on fk46-mamba2 with Mamba2's gated norm in the catalog: capture (coverage: session 26
#                  measured 67.6%, the gated norm's torch ops about 16% outside), check, Triton A/B, wrong-ssd and
#                  wrong-gated-norm, passthrough
#   V-B  GPU 1     issue 30 on fk46-qwen3-next (session 28 captured and checked it): the Triton A/B, wrong-gdn,
#                  passthrough; Kimi-Linear's KDA through the same slots (session 29's seam, never run yet): capture,
#                  Triton A/B, wrong-gdn; then issue 31: the adapter's cost (A/A, then passthrough, $ROUNDS interleaved rounds),
#                  compiled, on llama31-8b-decode
#   V-F  GPU 3     after S-C: issue 29's gemm and fused_moe checked on session 28's fk46-qwen3-next capture, fk-vllm-moe
#                  in the transformers host; issue 32: BGE-M3 and ColBERTv2 in vLLM's pooling runner
# sglang:
#   S-C  GPUs 2,3  issue 33: the Triton A/B at TP=2 again, now that each scheduler reports its rank (session 28's
#                  report had no per-rank table), once V-D is done
#   S-A  GPU 2     after S-C: issue 31, the adapter's cost in SGLang's default mode (llama31-8b-decode); issue 29's
#                  gemm and fused_moe checked on session 28's SGLang fk46-qwen3-next capture
# pair-transformers, pair-vllm: T-A and V-F then V-B on a 2-GPU machine, after the same staging (session 30).
# Sessions 26-28 ran earlier plans of this script (reports/gpu/s26-h200x4/, s27-h100x4/, s28-h100x4/: READMEs).
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

cut_lane() {  # cut_lane SECONDS NAME ISSUE ENGINE DEVICES [VAR=value ...]: a lane stopped after SECONDS (fk stops its
  # engine processes with it), for untimed work beside a warm-up that must be over before timed lanes start
  local limit=$1; shift
  timeout "$limit" bash -c "$(declare -f lane); HERE=$HERE ROOT=$ROOT; lane $(printf '%q ' "$@")"
}

survey_cpus() {  # prints the CPU list every engine process of both sides is then bound to (FK_BIND_CPUS), after
  # recording how fast each of the VM's CPUs runs the same Python, pass after pass, and in fresh processes (about 10 s;
  # $ROOT/vcpu-speed.txt). Session 57: one engine process's host ran 0.6x-1.3x the other's; session 58: the CPUs alike
  # at best, their speed wandering; both sides on the same 8 CPUs, the floor came down to 5.4% (8 of 16, not fewer: a
  # cold first process compiles some 290 Triton kernels with a worker a CPU). "1" (fk's default binding) if it fails
  mkdir -p "$ROOT" && python3 "$REPO/reports/gpu/vcpu_speed.py" 8 --bind "${BIND_N:-8}" > "$ROOT/vcpu-speed.txt" 2>&1
  local bind; bind=$(sed -n 's/^FK_BIND_CPUS=//p' "$ROOT/vcpu-speed.txt" | tail -n 1)
  [ -n "$bind" ] || echo "FK_BIND_CPUS=1 (the survey named none)" >> "$ROOT/vcpu-speed.txt"
  echo "${bind:-1}"
}

hosts_lane() {  # hosts_lane GPU "HOST_STEPS" "HOSTS": issue 32's transformers hosts on one GPU, its own weights
  # folder (the lane deletes its weights after each host)
  lane T-$1 32 transformers $1 STEPS="hosts" HOSTS="$3" HOST_STEPS="$2" FK_HOLD_MODELS=/tmp/fk-models-t$1
}

capture_lane() {  # capture_lane GPU "HOSTS": those hosts captured (--profile)
  hosts_lane "$1" capture "$2"
}

case ${1:-} in
  vllm)
    S28=$REPO/reports/gpu/s28-h100x4
    (lane V-D 30 vllm 3 STEPS="gputests" GPUTESTS_FILES="tests/plugins/test_triton_plugin.py" \
       GPUTESTS_K="gated or profiler"; touch "$ROOT/V-D.done") &
    (lane V-A 30 vllm 0 STEPS="linear" LINEAR=fk46-mamba2) &
    (lane V-B 30 vllm 1 STEPS="linear" LINEAR=fk46-qwen3-next LINEAR_STEPS="ab wrong pass"
     lane V-B 30 vllm 1 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="capture ab wrong"
     lane V-B 31 vllm 1 STEPS="adapter" ADAPTER_SC=llama31-8b-decode) &
    (while [ ! -e "$ROOT/S-C.done" ]; do sleep 10; done  # GPU 3: SGLang's TP=2 first
     lane V-F 29 vllm 3 STEPS="check tfx" WORKLOAD="$S28/i30/vllm/fk46/fk46-qwen3-next/vllm.json"
     lane V-F 32 vllm 3 STEPS="pooling") &
    wait ;;
  transformers)
    touch "$ROOT/T-A.started"
    lane T-A 32 transformers 2 STEPS="hosts"; touch "$ROOT/T-A.done" ;;
  sglang)
    S28=$REPO/reports/gpu/s28-h100x4
    # GPU 3: vLLM's GPU tests first; GPU 2: the transformers lane, where one was started
    while [ ! -e "$ROOT/V-D.done" ] || { [ -e "$ROOT/T-A.started" ] && [ ! -e "$ROOT/T-A.done" ]; }; do sleep 10; done
    (
     lane S-C 33 sglang 2,3 STEPS="triton" SCENARIOS=fk46-llama-3.1-tp2 ROUNDS=0; touch "$ROOT/S-C.done"
     lane S-A 31 sglang 2 STEPS="adapter" ADAPTER_SC=llama31-8b-decode
     lane S-A 29 sglang 2 STEPS="check" WORKLOAD="$S28/i29/sglang/fk46/fk46-qwen3-next/sglang.json") &
    wait ;;
  pair-transformers)  # a 2-GPU machine (nvidia-h100-x2): T-A on GPU 0, smallest models first
    # (stage extra-transformers-science.txt and extra-transformers-recsys.txt too: the 3D / science hosts, DLRMv2)
    lane T-A 32 transformers 0 STEPS="hosts" HOSTS="fk46-mobilenetv4 fk46-efficientnetv2 fk46-yolov10 fk46-lightgcn \
      fk46-pi0 fk46-instantngp fk46-pointtransformerv3 fk46-3dgs fk46-sdxl fk46-hunyuanvideo-1.5 fk46-flux.1-dev \
      fk46-openfold3 fk46-dlrmv2"; touch "$ROOT/T-A.done" ;;
  pair-vllm)  # ... and on GPU 1: V-F's pooling, then V-B
    lane V-F 32 vllm 1 STEPS="pooling"
    lane V-B 30 vllm 1 STEPS="linear" LINEAR=fk46-qwen3-next LINEAR_STEPS="ab wrong pass"
    lane V-B 30 vllm 1 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="capture ab wrong"
    lane V-B 31 vllm 1 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ;;
  s31-vllm)  # session 31, a 4-GPU machine: GPUs 2 and 3 take short vLLM runs while SGLang stages, then SGLang's TP=2
    S28=$REPO/reports/gpu/s28-h100x4
    (lane V-B 30 vllm 0 STEPS="linear" LINEAR=fk46-qwen3-next LINEAR_STEPS="ab wrong pass"
     lane V-B 30 vllm 0 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="capture ab wrong") &
    (lane V-C 31 vllm 1 STEPS="adapter" ADAPTER_SC=llama31-8b-decode
     lane V-C 29 vllm 1 STEPS="tfx") &
    (lane V-E 29 vllm 2 STEPS="check" WORKLOAD="$S28/i30/vllm/fk46/fk46-qwen3-next/vllm.json"; touch "$ROOT/V-E.done") &
    (lane V-F 32 vllm 3 STEPS="pooling" POOLING=fk46-bge-m3; touch "$ROOT/V-F.done") &
    wait ;;
  s31-sglang)  # ... once SGLang is staged: TP=2 on GPUs 2,3 when their vLLM runs are done, then the adapter's cost
    while [ ! -e "$ROOT/V-E.done" ] || [ ! -e "$ROOT/V-F.done" ]; do sleep 5; done
    lane S-C 33 sglang 2,3 STEPS="triton wrong" SCENARIOS=fk46-llama-3.1-tp2 ROUNDS=0
    (lane S-A 31 sglang 2 STEPS="adapter" ADAPTER_SC=llama31-8b-decode) &
    (lane V-A 30 vllm 3 STEPS="linear" LINEAR=fk46-mamba2) &
    wait ;;
  s32-vllm)  # session 32, vLLM only: issue 33's TP=4 on all four GPUs first, then one lane a GPU
    S31=$REPO/reports/gpu/s31-h100x4
    lane V-T 33 vllm 0,1,2,3 TP=4 STEPS="triton wrong pass" PASS_REUSE=1 SCENARIOS=fk46-llama-3.1-tp4 ROUNDS=0
    (lane V-B 30 vllm 0 STEPS="linear" LINEAR=fk46-qwen3-next LINEAR_STEPS="ab pass"
     lane V-B 30 vllm 0 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="capture ab wrong") &
    (lane V-C 31 vllm 1 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=aa) &
    (lane V-D 31 vllm 2 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=pass) &
    (lane V-A 30 vllm 3 STEPS="linear" LINEAR=fk46-mamba2 LINEAR_STEPS="ab pass wrong check" \
       LINEAR_WORKLOAD="$S31/i30/vllm/fk46/fk46-mamba2/vllm.json") &
    wait ;;
  s33-vllm)  # session 33 (vLLM staged first): the adapter's cost on GPUs 2 and 3, 5 rounds each on llama31-8b-decode, the
    # passthrough now on vLLM's compiled native path, the A/A beside it
    (lane V-C 31 vllm 2 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=aa) &
    (lane V-D 31 vllm 3 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=pass) &
    wait ;;
  s33-sglang)  # ... once SGLang is staged, GPUs 0 and 1: issue 33 at TP=2, the passthrough (one process a side; session
    # 31's Triton run PASSED with every rank) and wrong-all-reduce against its baseline; then the adapter's cost in
    # SGLang's default mode, 3 rounds (what the hold leaves time for)
    lane S-T 33 sglang 0,1 STEPS="pass wrong" WRONG_BASE=pass SCENARIOS=fk46-llama-3.1-tp2 ROUNDS=0
    (lane S-C 31 sglang 0 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=aa ROUNDS=3) &
    (lane S-D 31 sglang 1 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=pass ROUNDS=3) &
    wait ;;
  s34-sglang)  # session 34, SGLang only: TP=4 on all four GPUs (Triton, then the passthrough against its baseline,
    # all_reduce now on SGLang's own call; wrong-all-reduce failed at TP=2 in session 33), then one lane a GPU, each
    # short enough for what the hold leaves: GPU 0 fk46-llama-3.1 (issues 29 and 30: the Triton A/B after session 28's
    # attention change, the passthrough against its baseline, then wrong-attention and wrong-gemm); GPU 1 issue 29's
    # gemm / fused_moe check on session 28's fk46-qwen3-next capture; GPU 2 issue 30's paged_attention check on session
    # 27's fk46-llama-3.1 capture (last checked before the exp2 change); GPU 3 issue 31's adapter cost on the prefill
    # scenario (A/A, then passthrough, 3 rounds; the 5-round decode runs do not fit behind TP=4). Stage with
    # KEEP="$S28/i29/sglang/fk46/fk46-qwen3-next/sglang.json $S27/i29/sglang/fk46/fk46-llama-3.1/sglang.json" (repo paths)
    S28=$REPO/reports/gpu/s28-h100x4 S27=$REPO/reports/gpu/s27-h100x4
    lane S-T 33 sglang 0,1,2,3 TP=4 STEPS="triton pass" PASS_REUSE=1 SCENARIOS=fk46-llama-3.1-tp4 ROUNDS=0
    (lane S-L 30 sglang 0 STEPS="ab pass wrong" SC=fk46-llama-3.1) &
    (lane S-Q 29 sglang 1 STEPS="check" WORKLOAD="$S28/i29/sglang/fk46/fk46-qwen3-next/sglang.json") &
    (lane S-A 30 sglang 2 STEPS="check" WORKLOAD="$S27/i29/sglang/fk46/fk46-llama-3.1/sglang.json") &
    (lane S-P 31 sglang 3 STEPS="adapter" ADAPTER_SC=llama31-8b-4l-prefill ROUNDS=3) &
    wait ;;
  s35-vllm)  # session 35's hold, vLLM (issues 29, 30, 32; stage with KEEP=the S31 mamba2 capture), then s35-sglang:
    # GPU 0: Mamba2 (Triton A/B, passthrough, wrong-ssd / wrong-gated-norm, the check with gated_rms_norm, a capture
    # last for the device time inside slot calls); GPU 1: qwen3-next's Triton A/B and its passthrough (the GDN
    # prep-kernel seam), then Kimi-Linear; GPU 2: fk46-llama-3.1 (Triton after session 28's attention change, the
    # native-path passthrough, wrong-attention, wrong-gemm), SGLang's lane after it; GPU 3: fk-vllm-moe in the
    # transformers host (issue 29's third-party plugin), fk46-mixtral's Triton A/B, passthrough and wrong-moe, then
    # ColBERTv2 and Whisper in vLLM
    S31=$REPO/reports/gpu/s31-h100x4
    (lane V-A 30 vllm 0 STEPS="linear" LINEAR=fk46-mamba2 LINEAR_STEPS="ab pass wrong check capture" \
       LINEAR_WORKLOAD="$S31/i30/vllm/fk46/fk46-mamba2/vllm.json") &
    (lane V-B 30 vllm 1 STEPS="linear" LINEAR=fk46-qwen3-next LINEAR_STEPS="ab pass"
     lane V-B 30 vllm 1 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="capture ab wrong pass") &
    (lane V-L 30 vllm 2 STEPS="ab pass wrong" SC=fk46-llama-3.1) &
    (lane V-F 29 vllm 3 STEPS="tfx"
     lane V-F 29 vllm 3 STEPS="ab pass wrong" SC=fk46-mixtral AB_INTERLEAVE=0 WRONG=wrong-moe
     lane V-F 32 vllm 3 STEPS="pooling" POOLING="fk46-colbertv2 fk46-whisper") &
    wait ;;
  s35-sglang)  # session 35's SGLang lane, started once SGLang is staged while s35-vllm runs; it shares GPU 2 with
    # V-L (fk's GPU lock runs one engine process at a time): issue 29's gemm / fused_moe check on the S28 qwen3-next
    # capture again (session 34's FAIL was the thread guard's false positive), BGE-M3 in SGLang's embedding engine,
    # then a capture of fk46-llama-3.1 (the device time inside slot calls)
    S28=$REPO/reports/gpu/s28-h100x4
    lane S-Q 29 sglang 2 STEPS="check" WORKLOAD="$S28/i29/sglang/fk46/fk46-qwen3-next/sglang.json"
    lane S-Q 32 sglang 2 STEPS="pooling" POOLING=fk46-bge-m3
    lane S-Q 30 sglang 2 STEPS="capture" SC=fk46-llama-3.1 ;;
  s36-vllm)  # the next hold (stage with KEEP=the S31 mamba2 capture; vLLM, then SGLang for s36-sglang): what session 35
    # left (one fk46 A/B takes 9-14 min on an H100). GPU 0: Mamba2's Triton A/B again (its float32 judge now fits:
    # max_num_seqs sized for correctness), wrong-ssd / wrong-gated-norm; GPU 3, beside s36-sglang's lane: Mamba2's
    # check with gated_rms_norm, then its capture (the device time inside slot calls); GPU 1:
    # the KDA natives' GPU tests, then Kimi-Linear (capture, Triton A/B, wrong-gdn, passthrough); GPU 2: wrong-gemm on
    # fk46-llama-3.1 (H100), fk46-mixtral's capture on an H100 (its coverage; session 22's H100 profile was spoiled),
    # then ColBERTv2 and Whisper in vLLM's pooling / transcription paths (profiling fixed)
    S31=$REPO/reports/gpu/s31-h100x4
    (lane V-A 30 vllm 0 STEPS="linear" LINEAR=fk46-mamba2 LINEAR_STEPS="ab wrong") &
    (lane V-C 30 vllm 3 STEPS="linear" LINEAR=fk46-mamba2 LINEAR_STEPS="check capture" \
       LINEAR_WORKLOAD="$S31/i30/vllm/fk46/fk46-mamba2/vllm.json") &
    (lane V-K 30 vllm 1 STEPS="gputests" GPUTESTS_FILES="tests/engines/vllm/test_natives_gpu.py" GPUTESTS_K="recurrent"
     lane V-K 30 vllm 1 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="capture ab wrong pass") &
    (lane V-L 29 vllm 2 STEPS="wrong" SC=fk46-llama-3.1 WRONG=wrong-gemm
     lane V-L 29 vllm 2 STEPS="capture" CAPTURE=fk46-mixtral
     lane V-L 32 vllm 2 STEPS="pooling" POOLING="fk46-colbertv2 fk46-whisper") &
    wait ;;
  s36-sglang)  # started once SGLang is staged while s36-vllm runs (GPU 3): BGE-M3 in SGLang's embedding engine again
    # (profiling fixed), a capture of fk46-llama-3.1 (the device time inside slot calls), then issue 31's prefill
    # scenario (A/A and passthrough, 3 rounds)
    lane S-Q 32 sglang 3 STEPS="pooling" POOLING=fk46-bge-m3
    lane S-Q 30 sglang 3 STEPS="capture" SC=fk46-llama-3.1
    lane S-P 31 sglang 3 STEPS="adapter" ADAPTER_SC=llama31-8b-4l-prefill ROUNDS=3 ;;
  s37-vllm)  # the next hold (stage with KEEP="<S36>/i32/vllm/fk46/fk46-colbertv2/vllm.json" and s37-sglang's files;
    # vLLM, then SGLang): issue 29's bar, the passthrough within the A/A floor on fk46-llama-3.1 and fk46-mixtral,
    # compiled, --smoke, 3 interleaved rounds, one side a GPU (each process ~2-4 min, the compile cache warm after the
    # first); then what session 36 left: Kimi-Linear's wrong-gdn and passthrough (GPU 0), Whisper's A/B (GPU 1), the
    # mixtral and mamba2 captures again for the device time inside slot calls, now counted once per kernel (GPU 2),
    # gemm checked on ColBERTv2's shapes (GPU 3: why its Triton embeddings match stock bit for bit)
    S36=$REPO/reports/gpu/s36-h100x4
    (lane V-1 31 vllm 0 STEPS="adapter" ADAPTER_SC=fk46-llama-3.1 ADAPTER_SIDES=aa ROUNDS=3 ADAPTER_ARGS="--smoke"
     lane V-1 30 vllm 0 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="wrong pass") &
    (lane V-2 31 vllm 1 STEPS="adapter" ADAPTER_SC=fk46-llama-3.1 ADAPTER_SIDES=pass ROUNDS=3 ADAPTER_ARGS="--smoke"
     lane V-2 32 vllm 1 STEPS="pooling" POOLING=fk46-whisper POOLING_STEPS="ab wrong") &  # captured in S36
    (lane V-3 31 vllm 2 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=aa ROUNDS=3 ADAPTER_ARGS="--smoke"
     lane V-3 30 vllm 2 STEPS="capture" CAPTURE="fk46-mixtral fk46-mamba2") &
    (lane V-4 31 vllm 3 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=pass ROUNDS=3 ADAPTER_ARGS="--smoke"
     lane V-4 29 vllm 3 STEPS="check" WORKLOAD="$S36/i32/vllm/fk46/fk46-colbertv2/vllm.json") &
    wait ;;
  s37-sglang)  # started once SGLang is staged while s37-vllm runs, one lane a GPU under fk's GPU lock (each engine
    # process or check has the GPU alone, so the adapter rounds' timings stay clean): issue 30's GDN slots checked in
    # SGLang on session 28's fk46-qwen3-next capture (Triton, passthrough, wrong-gdn); gemm checked on BGE-M3's shapes;
    # paged_attention and gemm checked on the H100 capture of fk46-llama-3.1 (session 34's PASS was on H200s), then
    # that capture again (SGLang's first device time inside slot calls, now with CPU activity in its trace); the
    # Triton A/B and passthrough on fk46-llama-3.1 on an H100 (after session 28's attention change). Stage with KEEP=
    # "<S28>/i29/sglang/fk46/fk46-qwen3-next/sglang.json <S36>/i32/sglang/fk46/fk46-bge-m3/sglang.json
    # <S36>/i30/sglang/fk46/fk46-llama-3.1/sglang.json" (repo paths)
    S28=$REPO/reports/gpu/s28-h100x4 S36=$REPO/reports/gpu/s36-h100x4
    (lane S-G 30 sglang 0 STEPS="linear" LINEAR=fk46-qwen3-next LINEAR_STEPS="check" \
       LINEAR_WORKLOAD="$S28/i29/sglang/fk46/fk46-qwen3-next/sglang.json") &
    (lane S-Q 29 sglang 1 STEPS="check" WORKLOAD="$S36/i32/sglang/fk46/fk46-bge-m3/sglang.json") &
    (lane S-A 30 sglang 2 STEPS="check capture" WORKLOAD="$S36/i30/sglang/fk46/fk46-llama-3.1/sglang.json") &
    (lane S-L 30 sglang 3 STEPS="ab pass" SC=fk46-llama-3.1) &
    wait ;;
  s38-transformers)  # first in the s38 hold, before SGLang stages (no engine to stage: the four extra-transformers*
    # lists' parts, then `fk_gpu.sh transformers setup`): issue 32's 13 hosted architectures that never ran on a GPU,
    # captured with --profile (what `fk scenarios --all` counts as running, and coverage.md), then session 30's four
    # (their device-time shares were spoiled by the value statistics, fixed since), one lane a GPU, each
    # with its own weights folder (the lane deletes its weights after each host; s38-sglang's lanes share
    # /tmp/fk-models). s38-sglang's processes take each GPU in turn with these under fk's GPU lock
    for i in 0 1 2 3; do
      case $i in
        0) H="fk46-flux.1-dev fk46-3dgs fk46-instantngp fk46-mobilenetv4" ;;
        1) H="fk46-hunyuanvideo-1.5 fk46-dp3 fk46-dlrmv2 fk46-efficientnetv2 fk46-lightgcn" ;;
        2) H="fk46-sdxl fk46-pi0 fk46-pointtransformerv3 fk46-yolov10" ;;
        3) H="fk46-rwkv-7 fk46-gla fk46-retnet fk46-openfold3" ;;
      esac
      (capture_lane $i "$H") &
    done
    wait ;;
  s38-sglang)  # the next hold, after s38-transformers (stage SGLang while its captures run): issue 29's passthrough
    # within the A/A floor on fk46-llama-3.1 and fk46-mixtral (as s37-vllm's, 3 rounds), then issue 31's adapter cost
    # on llama31-8b-decode at 5 rounds and the prefill scenario's passthrough
    (lane S-1 31 sglang 0 STEPS="adapter" ADAPTER_SC=fk46-llama-3.1 ADAPTER_SIDES=aa ROUNDS=3 ADAPTER_ARGS="--smoke") &
    (lane S-2 31 sglang 1 STEPS="adapter" ADAPTER_SC=fk46-llama-3.1 ADAPTER_SIDES=pass ROUNDS=3 ADAPTER_ARGS="--smoke") &
    (lane S-3 31 sglang 2 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=aa ROUNDS=3 ADAPTER_ARGS="--smoke") &
    (lane S-4 31 sglang 3 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=pass ROUNDS=3 ADAPTER_ARGS="--smoke") &
    wait
    (lane S-C 31 sglang 2 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=aa) &
    (lane S-D 31 sglang 3 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=pass) &
    (lane S-P 31 sglang 1 STEPS="adapter" ADAPTER_SC=llama31-8b-4l-prefill ROUNDS=3) &
    wait ;;
  s39-sglang)  # the next hold, SGLang staged first: issue 29's passthrough within the A/A floor on fk46-llama-3.1 and
    # fk46-mixtral, 3 rounds, each side on its own GPU (s38's llama A/A shared GPU 0 with a weights writer and gave no
    # floor; its mixtral pair ran out of hold). Each lane marks its GPU free for s39-transformers when it ends
    for i in 0 1 2 3; do
      case $i in
        0) SC=fk46-llama-3.1 SIDE=aa ;; 1) SC=fk46-llama-3.1 SIDE=pass ;;
        2) SC=fk46-mixtral SIDE=aa ;; 3) SC=fk46-mixtral SIDE=pass ;;
      esac
      (lane S-$i 31 sglang $i STEPS="adapter" ADAPTER_SC=$SC ADAPTER_SIDES=$SIDE ROUNDS=3 ADAPTER_ARGS="--smoke"
       touch "$ROOT/gpu-$i.free") &
    done
    wait ;;
  s39-transformers)  # started once `fk_gpu.sh transformers setup` is done, while s39-sglang runs: issue 32's hosts that
    # s38 left (retnet and openfold3 cut off by the hold's end; 3dgs's writer, fixed, held back instantngp and
    # mobilenetv4; dlrmv2, pointtransformerv3 and dp3 as far as the staged lists now reach), captured with --profile, a
    # lane a GPU once s39-sglang's lane there has ended
    for i in 0 1 2 3; do
      case $i in
        0) H="fk46-openfold3" ;;
        1) H="fk46-retnet fk46-mobilenetv4" ;;
        2) H="fk46-3dgs fk46-instantngp" ;;
        3) H="fk46-dlrmv2 fk46-pointtransformerv3 fk46-dp3" ;;
      esac
      (until [ -e "$ROOT/gpu-$i.free" ]; do sleep 10; done
       capture_lane $i "$H"
       # then, on GPU 1, SGLang's diffusion runtime's first run (issue 32 item 4; extra-sglang-diffusion.txt staged)
       [ $i = 1 ] && lane S-D 32 sglang 1 STEPS="diffusion" FK_HOLD_MODELS=/tmp/fk-models-sd) &
    done
    wait ;;
  s40-vllm)  # the next hold (stage vLLM with KEEP="reports/gpu/s37-h100x4/i30/vllm/fk46/fk46-mixtral/vllm.json"): what
    # issues 29 and 30 still lack in vLLM. GPU 0 (issue 29): gemm and fused_moe checked on an H100 capture (session
    # 27's check read session 26's H200 capture), the Triton A/B in eager mode, tiny-mixtral-fp8 (quantized layers
    # left stock, with the reason). GPUs 1 and 2 (issue 30): fk46-qwen3-next's passthrough and A/A, 3 rounds, --smoke,
    # side by side (session 35's passthrough was correctness only, with no A/A). GPU 3 (issue 30): fk46-mamba2
    # captured with the corrected "inside slot calls" share (bar 75%), then Kimi-Linear's wrong-gdn and passthrough.
    # Left for later holds: issue 31's suite (s41-sglang); fk46-mamba2's A/A and passthrough and the decode pair (s42-vllm)
    S37=$REPO/reports/gpu/s37-h100x4
    (lane V-0 29 vllm 0 STEPS="check ab quant" SC=fk46-mixtral WORKLOAD="$S37/i30/vllm/fk46/fk46-mixtral/vllm.json" \
       AB_MODE=eager AB_INTERLEAVE=0) &
    (lane V-1 31 vllm 1 STEPS="adapter" ADAPTER_SC=fk46-qwen3-next ADAPTER_SIDES=pass ROUNDS=3 ADAPTER_ARGS="--smoke") &
    (lane V-2 31 vllm 2 STEPS="adapter" ADAPTER_SC=fk46-qwen3-next ADAPTER_SIDES=aa ROUNDS=3 ADAPTER_ARGS="--smoke") &
    (lane V-3 30 vllm 3 STEPS="capture" CAPTURE=fk46-mamba2
     lane V-3 30 vllm 3 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="wrong pass") &
    wait ;;
  s40b-vllm)  # session 40's 4-GPU hold went back mid-run (idle between polls); on 2 GPUs, what fits its last 16 minutes:
    # issue 29's quantized layers left stock (tiny-mixtral-fp8) and the eager Triton A/B on fk46-mixtral; issue 30's
    # fk46-mamba2 capture
    S37=$REPO/reports/gpu/s37-h100x4
    (lane V-0 29 vllm 0 STEPS="quant ab" SC=fk46-mixtral WORKLOAD="$S37/i30/vllm/fk46/fk46-mixtral/vllm.json" \
       AB_MODE=eager AB_INTERLEAVE=0) &
    (lane V-3 30 vllm 1 STEPS="capture" CAPTURE=fk46-mamba2) &
    wait ;;
  s41-vllm)  # the next vLLM hold (stage vLLM with KEEP=""): what session 40's lost hold did not run. GPU 0: issue 29's
    # FP8 scenario again (its MoE layers now counted left stock), then fk46-mamba2's passthrough; GPUs 1 and 2: issue
    # 30's fk46-qwen3-next passthrough and A/A, 3 rounds, --smoke, side by side; GPU 3: Kimi-Linear's wrong-gdn and
    # passthrough, then fk46-mamba2's A/A (its pair on GPU 0)
    (lane V-0 29 vllm 0 STEPS="quant"
     lane V-0 31 vllm 0 STEPS="adapter" ADAPTER_SC=fk46-mamba2 ADAPTER_SIDES=pass ROUNDS=3 ADAPTER_ARGS="--smoke") &
    (lane V-1 31 vllm 1 STEPS="adapter" ADAPTER_SC=fk46-qwen3-next ADAPTER_SIDES=pass ROUNDS=3 ADAPTER_ARGS="--smoke") &
    (lane V-2 31 vllm 2 STEPS="adapter" ADAPTER_SC=fk46-qwen3-next ADAPTER_SIDES=aa ROUNDS=3 ADAPTER_ARGS="--smoke") &
    (lane V-3 30 vllm 3 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="wrong pass"
     lane V-3 31 vllm 3 STEPS="adapter" ADAPTER_SC=fk46-mamba2 ADAPTER_SIDES=aa ROUNDS=3 ADAPTER_ARGS="--smoke") &
    wait ;;
  s41-h200)  # one H200 (no multi-GPU kind lent): issue 29's FP8 scenario again, eager and correctness only (its MoE
    # layers now counted left stock; session 40 ran it compiled), then issue 30's fk46-qwen3-next A/A and passthrough,
    # 3 interleaved rounds each, --smoke, the passthrough reusing the A/A's float32 reference
    lane V-0 29 vllm 0 STEPS="quant" QUANT_ARGS="--mode eager --correctness-only" QUANT_TAG=eager
    lane V-0 31 vllm 0 STEPS="adapter" ADAPTER_SC=fk46-qwen3-next ROUNDS=3 ADAPTER_ARGS="--smoke" ;;
  s42-h200)  # one H200: issue 30's GDN decode fix (beta rounded as stock's packed decode kernel does) seen on a GPU
    # (its test against the packed kernel), then fk46-qwen3-next's A/A and passthrough, 3 rounds, --smoke, with
    # TRITON_CACHE_AUTOTUNING=1 (session 41's pair without it: process-to-process spread 10-26%, floor 27-161%; FLA's
    # kernels autotune anew in every process); the passthrough's streams show whether the fix made them identical
    lane V-0 30 vllm 0 STEPS="gputests" GPUTESTS_FILES=" " GPUTESTS_K="gdn_passthrough" GPUTESTS_S=300
    lane V-0 31 vllm 0 STEPS="adapter" ADAPTER_SC=fk46-qwen3-next ROUNDS=3 ADAPTER_ARGS="--smoke" \
      TRITON_CACHE_AUTOTUNING=1 ;;
  s42-h200x2)  # two H200s: the same, the A/A and passthrough side by side; then fk46-mamba2's pair likewise
    (lane V-0 31 vllm 0 STEPS="adapter" ADAPTER_SC=fk46-qwen3-next ADAPTER_SIDES=aa ROUNDS=3 ADAPTER_ARGS="--smoke" \
       TRITON_CACHE_AUTOTUNING=1
     lane V-0 31 vllm 0 STEPS="adapter" ADAPTER_SC=fk46-mamba2 ADAPTER_SIDES=aa ROUNDS=3 ADAPTER_ARGS="--smoke" \
       TRITON_CACHE_AUTOTUNING=1) &
    (lane V-1 30 vllm 1 STEPS="gputests" GPUTESTS_FILES=" " GPUTESTS_K="gdn_passthrough" GPUTESTS_S=300
     lane V-1 31 vllm 1 STEPS="adapter" ADAPTER_SC=fk46-qwen3-next ADAPTER_SIDES=pass ROUNDS=3 ADAPTER_ARGS="--smoke" \
       TRITON_CACHE_AUTOTUNING=1
     lane V-1 31 vllm 1 STEPS="adapter" ADAPTER_SC=fk46-mamba2 ADAPTER_SIDES=pass ROUNDS=3 ADAPTER_ARGS="--smoke" \
       TRITON_CACHE_AUTOTUNING=1) &
    wait ;;
  s62-sglang-diffusion)  # one GPU, SGLang (its 15 parts + the cutlass wheel, then `stage_extra.sh sglang-diffusion`:
    # 6.5 MiB, one more call): issue 32 item 4, SGLang's diffusion runtime again since session 39's first run ended in
    # its output-file hash of fk's tensors (fixed since): FLUX (native pipeline), SDXL and HunyuanVideo-1.5, the
    # passthrough A/B, then the Triton plugin against its baseline; after s51-sglang-h100 in the same hold if time is left
    lane S-D 32 sglang 0 STEPS="diffusion" FK_HOLD_MODELS=/tmp/fk-models-sd \
      DIFFUSION="fk46-flux.1-dev fk46-sdxl fk46-hunyuanvideo-1.5" ;;
  s62-hosts-ab-a)  # one GPU, no engine: issue 32's Triton A/Bs (`--smoke`, one process a side, against the forward
    # one precision up, kernel names as proof) of the newly hosted architectures whose libraries are
    # extra-transformers.txt's and extra-transformers-lerobot.txt's (126 MiB, 3 calls: `PART_MIB=22 bash reports/gpu/stage_extra.sh transformers`,
    # the same for transformers-lerobot, then `python3 reports/gpu/pack_calls.py .stage/extra-transformers
    # .stage/extra-transformers-lerobot --out .stage/calls-hosts-a`). Session 65 (s65-h100/) ran five: mobilenetv4 and
    # yolov10 PASSED; pi0's sdpa kernel ran out of shared memory at head size 256 and dp3's float64 forward failed
    # (both fixed since), efficientnetv2's PASSED was blind (INCONCLUSIVE since). Session 66 (s66-h100/): pi0, dp3
    # and hunyuanvideo-1.5 PASSED, flux.1-dev cut by the budget; its GPU tests never ran (the transformers engine
    # folder's collection failed on lerobot's dependency draccus, which ships a top-level `tests` package: only the
    # vision file now, collection errors not fatal). So the vision kernels' GPU tests first (the sdpa slot's
    # head-size-256 case), then efficientnetv2 (its residual branches start small since), the two not reached, and
    # hunyuanvideo-1.5 again: since session 66 FLUX's and HunyuanVideo's attention enter the sdpa slot through
    # diffusers' attention registry (55% of hunyuanvideo's profiled step was that attention, stock); dp3 again
    # after efficientnetv2: since session 67 its U-Net's Conv1d enter the conv2d slot (conv was 62.8% of its step)
    lane T-0 30 transformers 0 STEPS="gputests" GPUTESTS_FILES="tests/plugins/test_triton_vision.py" \
      GPUTESTS_DIRS=" " GPUTESTS_K="on_a_gpu" GPUTESTS_S=300
    hosts_lane 0 ab "fk46-efficientnetv2 fk46-dp3 fk46-flux.1-dev fk46-sdxl fk46-hunyuanvideo-1.5" ;;
  s62-hf-hosts)  # one GPU, no engine and nothing staged (HF transformers is on the GPU machine; one call: the tree,
    # `fk_gpu.sh transformers setup`, launch): the HF architectures captured in session 4, before the gemm, layer_norm,
    # conv2d and sdpa slots existed (coverage.md shows those columns "-"): captured again, then their Triton A/B.
    # Sessions 63-64 (s63-h100/, s64-h100/) ran all of them; fk46-sam-3.1's float32 Triton A/B failed the fixed
    # float32 thresholds (8.8e-4 > 1e-4), then PASSED against the float64 forward fk makes since (s64-h100/hold2/).
    # What is left: fk-wrong's wrong-gemm and the passthrough against that A/B's baseline (a wrong kernel must fail
    # the float64 rule on a GPU too, the engine's own ops give err_c == err_b), so the A/B first: about 6 minutes.
    # Since session 67 its attention enters the sdpa slot (it stayed stock: Sam3Attention looks "sdpa" up by name,
    # which fk took for a test of the name; 21.3% of its profiled step): the A/B runs the Triton sdpa kernel there too
    hosts_lane 0 "ab wrong" "fk46-sam-3.1" ;;
  s62-hosts-ab-b)  # the same for the rest: torchrec, torch-pointcloud, flash-linear-attention and openfold3
    # (extra-transformers-recsys.txt, -science.txt, -fla.txt: 200 MiB, 4 calls, packed as above into
    # .stage/calls-hosts-b), the quickest first (captures 31-532 s; the fla models' captures were slow from fk's call
    # counting on 130k-260k calls)
    hosts_lane 0 ab "fk46-dlrmv2 fk46-pointtransformerv3 fk46-retnet fk46-gla fk46-rwkv-7 fk46-openfold3" ;;
  s42-mixtral-x2)  # two H200s, vLLM: issue 29's passthrough on fk46-mixtral against its A/A, 5 interleaved rounds each,
    # side by side (session 37's 3-round pair read "no change" with a delta interval reaching 27% slower on
    # prefill-heavy: one cold candidate process ran 16% slower; fk compare now calls that "too noisy")
    (lane V-0 31 vllm 0 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=aa ROUNDS=5 ADAPTER_ARGS="--smoke") &
    (lane V-1 31 vllm 1 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=pass ROUNDS=5 ADAPTER_ARGS="--smoke") &
    wait ;;
  s42-mixtral-x4)  # four H200s, vLLM: the same pair, each side on two GPUs (round 1 alone on the first, later rounds
    # two at a time, both sides of a round on one GPU), about 3 rounds' time for 5; while round 1 leaves GPUs 1 and 3
    # free: the GDN decode fix's GPU test on GPU 3; then Kimi-Linear's wrong-gdn and passthrough once the A/A is done.
    # ADAPTER_GPUS are physical numbers: fk gives each engine process its set as CUDA_VISIBLE_DEVICES
    (lane V-0 31 vllm 0,1 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=aa ROUNDS=${MIX_ROUNDS:-5} ADAPTER_GPUS="0 1" \
       ADAPTER_ARGS="--smoke"
     lane V-0 30 vllm 0 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="wrong pass") &
    (lane V-3 30 vllm 3 STEPS="gputests" GPUTESTS_FILES=" " GPUTESTS_K="gdn_passthrough" GPUTESTS_S=240) &
    (sleep 20; lane V-2 31 vllm 2,3 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=pass ROUNDS=5 \
       ADAPTER_GPUS="2 3" ADAPTER_ARGS="--smoke") &
    wait ;;
  s43-mixtral-sglang-x4)  # four H200s, SGLang: issue 29's pair as s42-mixtral-x4 (session 39's 3 rounds: batch-1
    # latency reached +10.0%)
    (lane S-0 31 sglang 0,1 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=aa ROUNDS=5 ADAPTER_GPUS="0 1" \
       ADAPTER_ARGS="--smoke") &
    (sleep 20; lane S-2 31 sglang 2,3 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=pass ROUNDS=5 \
       ADAPTER_GPUS="2 3" ADAPTER_ARGS="--smoke") &
    wait ;;
  s43-mix-vllm)  # four H200s, both engines in one hold (issue 29's last item), SGLang first: the cutlass wheel's 2
    # parts (.stage/extra-sglang: `mkdir -p /tmp/fkstage/extra-sglang && cp PART /tmp/fkstage/extra-sglang/`), SGLang's
    # 15 (the last: `bash .stage/sglang/part14/recv.sh && bash /tmp/fkstage/sglang/install.sh; ...; fk_gpu.sh sglang
    # setup`, start s43-mix-sglang), about 3 min; then vLLM's 7 and this. fk46-mixtral's A/A and passthrough,
    # 4 interleaved rounds, one GPU a side (vLLM's 5-round pair took 12-13 min on two GPUs a side; here about 18;
    # SGLang's 3-round pair took 14.3 min with no float32 reference: here about 18)
    (lane V-0 31 vllm 0 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=aa ROUNDS=4 ADAPTER_ARGS="--smoke") &
    (sleep 20; lane V-1 31 vllm 1 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=pass ROUNDS=4 \
       ADAPTER_ARGS="--smoke") &
    wait ;;
  s43-mix-sglang)  # the same pair in SGLang on GPUs 2 and 3, started first (see s43-mix-vllm)
    (lane S-2 31 sglang 2 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=aa ROUNDS=4 ADAPTER_ARGS="--smoke") &
    (sleep 20; lane S-3 31 sglang 3 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=pass ROUNDS=4 \
       ADAPTER_ARGS="--smoke") &
    wait ;;
  s45-mix-vllm-x4)  # session 44's plan at 7 rounds (session 44, 5 rounds: all else "no change", batch-1 latency too
    # noisy, its processes 0.28-0.36 s, each steady within itself). The lent 4-H200 host is one NUMA node (session
    # 44's second hold), so fk's default CPU binding changes nothing there: the timed lanes run with FK_BIND_CPUS=gpu,
    # each engine process on its GPU's 16 CPUs (a batch-1 step is mostly host work, crossing two processes: whether
    # keeping them on a fixed block steadies it is the experiment; session 44 unbound is the control). Round 1, then 3
    # waves of two: ~12 min a lane.
    # While GPU 0 warms, GPU 3 runs issue 30's last Kimi-Linear item, its passthrough (compiled, correctness only; its
    # wrong-gdn was INCORRECT in session 42), and GPU 1 issue 31's op-level check against vLLM's compiled natives on a
    # fresh fk46-llama-3.1 capture (never run yet); each cut at 9 minutes so that it never runs beside the timed lanes
    MIX_ROUNDS=7 KIMI_PASS=1 CHECKC=1 MIX_BIND=gpu bash "$0" s44-mix-vllm-x4 ;;
  s46-qwen3-next-x4)  # four H200s, vLLM: issue 30's fk46-qwen3-next pair as s45 ran Mixtral's (warm-up first, 7
    # rounds, two GPUs a side, FK_BIND_CPUS=gpu): session 41's A/A floor was 27-161% at 3 rounds on one GPU, cold
    MIX_SC=fk46-qwen3-next MIX_ROUNDS=7 MIX_BIND=gpu bash "$0" s44-mix-vllm-x4 ;;
  s44-mix-vllm-x4)  # four H200s, vLLM: issue 29's last pair again (session 43's stayed INCOMPLETE: a cold first
    # process, and slow runs in one lane while the other lane's engine or float32 reference compiled). First every
    # variant's caches warmed on GPU 0 (stock, passthrough, float32: about 7 min), then the A/A and the passthrough at 5
    # interleaved rounds, two GPUs a side (session 42: 12-13 min with cold starts), both taking the warm-up's float32
    # reference (REF_WARM: no reference process starts while the other lane times). Compiles now counted per run
    [ -n "${KIMI_PASS:-}" ] && cut_lane 540 V-3 30 vllm 3 STEPS=linear LINEAR=fk46-kimi-linear LINEAR_STEPS=pass &
    [ -n "${CHECKC:-}" ] && cut_lane 540 V-1 31 vllm 1 STEPS=checkc CAPTURE=fk46-llama-3.1 &
    lane V-0 31 vllm 0 STEPS="warm" ADAPTER_SC=${MIX_SC:-fk46-mixtral} ADAPTER_ARGS="--smoke"
    wait  # the lanes beside the warm-up, where any runs
    (lane V-0 31 vllm 0,1 STEPS="adapter" ADAPTER_SC=${MIX_SC:-fk46-mixtral} ADAPTER_SIDES=aa ROUNDS=${MIX_ROUNDS:-5} ADAPTER_GPUS="0 1" \
       ADAPTER_ARGS="--smoke" REF_WARM=1 FK_BIND_CPUS=${MIX_BIND:-1}) &
    (sleep 20; lane V-2 31 vllm 2,3 STEPS="adapter" ADAPTER_SC=${MIX_SC:-fk46-mixtral} ADAPTER_SIDES=pass ROUNDS=${MIX_ROUNDS:-5} \
       ADAPTER_GPUS="2 3" ADAPTER_ARGS="--smoke" REF_WARM=1 FK_BIND_CPUS=${MIX_BIND:-1}) &
    wait ;;
  s44-qwen3-next-x4)  # four H200s, vLLM: issue 30's qwen3-next pair as s42-mixtral-x4 (session 41's floor 27-161% at
    # 3 rounds on one GPU), timed repeats that compile now run again; then Kimi-Linear's passthrough on GPU 0.
    # TRITON_CACHE_AUTOTUNING=1 changes nothing in vLLM 0.26 (its env_override.py sets it by default): kept only so
    # that the tuning environment says so
    (lane V-0 31 vllm 0,1 STEPS="adapter" ADAPTER_SC=fk46-qwen3-next ADAPTER_SIDES=aa ROUNDS=5 ADAPTER_GPUS="0 1" \
       ADAPTER_ARGS="--smoke" TRITON_CACHE_AUTOTUNING=1
     lane V-0 30 vllm 0 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="pass") &
    (sleep 20; lane V-2 31 vllm 2,3 STEPS="adapter" ADAPTER_SC=fk46-qwen3-next ADAPTER_SIDES=pass ROUNDS=5 \
       ADAPTER_GPUS="2 3" ADAPTER_ARGS="--smoke" TRITON_CACHE_AUTOTUNING=1) &
    wait ;;
  s43-mixtral-sglang-x2)  # two H200s, SGLang: the same pair (session 39's batch-1 latency delta reached +10.0%)
    (lane S-0 31 sglang 0 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=aa ROUNDS=5 ADAPTER_ARGS="--smoke") &
    (lane S-1 31 sglang 1 STEPS="adapter" ADAPTER_SC=fk46-mixtral ADAPTER_SIDES=pass ROUNDS=5 ADAPTER_ARGS="--smoke") &
    wait ;;
  s44-decode-x2)  # two H200s, vLLM (or SGLang: `s44-decode-x2 sglang`): issue 31's adapter cost on llama31-8b-decode,
    # A/A and passthrough side by side, 5 interleaved rounds each (the bar: the passthrough interval within +-1%, or
    # inside the floor; session 33's vLLM pair reached 2.6% past a 1.60% floor, SGLang's ran 3 rounds)
    E=${2:-vllm}
    (lane X-0 31 "$E" 0 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=aa ROUNDS=5) &
    (lane X-1 31 "$E" 1 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=pass ROUNDS=5) &
    wait ;;
  s47-h200)  # one GPU (only one-GPU kinds lent): issue 30's Kimi-Linear passthrough (compiled, correctness only;
    # session 42's ran out of hold), then issue 31 on fk46-llama-3.1: a fresh capture and `fk check` against vLLM's
    # compiled natives (never run), then the compiled Triton A/B with its profiled step (the 80%-named bar), one
    # round; each step on its own so that what finishes is packed
    lane V-0 30 vllm 0 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="pass"
    lane V-0 31 vllm 0 STEPS="checkc split" CAPTURE=fk46-llama-3.1 SC=fk46-llama-3.1 AB_INTERLEAVE=0 ;;
  s48-h100)  # one GPU, vLLM (stage with KEEP=$S47W, below): issue 31 on fk46-llama-3.1, the compiled Triton A/B with
    # its profiled step (the 80%-named bar; cut by the end of session 47's hold), then fk check against the compiled
    # natives again on session 47's capture, with the launch fix (its fused_add_rms_norm read 7.78x from a native whose
    # launch outlasted its spin) and the passthrough's "stock" prediction
    S47W=reports/gpu/s47-h100/i31/vllm/fk46/fk46-llama-3.1/vllm.json
    lane V-0 31 vllm 0 STEPS="split checkc" SC=fk46-llama-3.1 CAPTURE=fk46-llama-3.1 AB_INTERLEAVE=0 WORKLOAD=$REPO/$S47W ;;
  s49-h100)  # one GPU, vLLM: issue 31's 80%-named bar with the profiled run that serves latency batch 32 (session
    # 48's profiled step was no timed workload; its rerun was cut after the baseline): the compiled fk46-llama-3.1
    # Triton A/B, 3 interleaved rounds (intervals; about 12 minutes with the cold first start)
    lane V-0 31 vllm 0 STEPS="split" SC=fk46-llama-3.1 AB_INTERLEAVE=3 ;;
  s50-h100)  # one GPU, vLLM: two of issue 31's bars in one hold. First the compiled fk46-llama-3.1 Triton A/B with its
    # profiled run (the 80%-named bar: it needs the attribution of one pair, not an interval; session 48: cold
    # baseline 146 s, candidate 94 s, the float32 reference now eager), then the adapter's cost on llama31-8b-decode:
    # the passthrough with the A/A of the same rounds (--with-aa), 5 rounds, compiled (a warm process about 45-70 s:
    # session 48's one H100 started in 16 s, session 33's 4-GPU host in 40 s; about 11-17 minutes for the 15 processes)
    # Then, as far as the hold goes, the prefill pair the same way (llama31-8b-4l-prefill, 4 layers)
    lane V-0 31 vllm 0 STEPS="split adapter" SC=fk46-llama-3.1 AB_INTERLEAVE=0 \
      ADAPTER_SC="llama31-8b-decode llama31-8b-4l-prefill" ADAPTER_SIDES=with ;;
  s50-short-h100)  # one GPU, vLLM, about 10 minutes of device time left: the compiled Triton A/B with its profiled
    # run on llama31-8b-4l (4 layers: seconds of weights, a quarter of the timed runs' steps), one process a side,
    # for the 80%-named bar's attribution
    lane V-0 31 vllm 0 STEPS="split" SC=llama31-8b-4l AB_INTERLEAVE=0 ;;
  s51-rounds-h100)  # one GPU, vLLM: issue 31's 80%-named bar over rounds. Session 51's one pair of processes named
    # 67% of latency batch 32's timed delta, where session 48's pairs timed 40% less: the compiled fk46-llama-3.1
    # Triton A/B with 3 interleaved rounds, every round profiled (about 5.5 min cold, then about 3.5 min a round);
    # then the prefill pair left from s50-h100 (llama31-8b-4l-prefill, passthrough --with-aa, 5 rounds)
    lane V-0 31 vllm 0 STEPS="split adapter" SC=fk46-llama-3.1 AB_INTERLEAVE=3 \
      ADAPTER_SC="llama31-8b-4l-prefill" ADAPTER_SIDES=with ;;
  s52-prefill-h100)  # one GPU, vLLM: issue 31's prefill pair at 5 rounds (session 52's hold ran 2: about 65 s a
    # process, 3.3 min a round, so about 17 min with the cold first round), the A/A of the same rounds (--with-aa)
    lane V-0 31 vllm 0 STEPS="adapter" ADAPTER_SC="llama31-8b-4l-prefill" ADAPTER_SIDES=with ;;
  s51-sglang-h100)  # one GPU, SGLang (15 parts + the cutlass wheel, about 2.5 minutes): issue 31's decode pair in
    # SGLang's default mode at 5 rounds (session 33 ran 3: passthrough 0.999 [0.996, 1.002], floor 0.52%), the
    # passthrough with the A/A of the same rounds (--with-aa, 15 processes); then the prefill pair the same way
    lane S-0 31 sglang 0 STEPS="adapter" ADAPTER_SC="llama31-8b-decode llama31-8b-4l-prefill" ADAPTER_SIDES=with ;;
  s52-linear-h100)  # one GPU, vLLM: issue 30's passthrough against the A/A floor on fk46-qwen3-next (fk46-mamba2:
    # s54-mamba2-h100), compiled, --quick (under --smoke a timed run of qwen3-next lasts about 2 s and one process differs
    # from the next by 10-26%: session 41's floor reached 27-161%), the A/A in the same rounds (--with-aa), 4 rounds:
    # 12 processes a model, about 100-120 s each on session 41's H200
    # (session 58: PASS, floor 5.4%, s58-h100/), both sides bound to the same CPUs (survey_cpus) and
    # VLLM_CUSTOM_SCOPES_FOR_PROFILING (both sides, every process): vLLM's runner and scheduler phases as profiler
    # ranges in the host table
    lane V-0 31 vllm 0 STEPS="adapter" ADAPTER_SC="${LINEAR_SC:-fk46-qwen3-next}" ADAPTER_SIDES=with \
      ROUNDS=4 ADAPTER_ARGS="--quick" VLLM_CUSTOM_SCOPES_FOR_PROFILING=1 FK_BIND_CPUS="$(survey_cpus)" ;;
  s54-mamba2-h100)  # one GPU, vLLM: issue 30's passthrough against the A/A floor on fk46-mamba2, compiled, --smoke,
    # the A/A in the same rounds (--with-aa), both sides on the same CPUs, vLLM's phases in the host table (as session
    # 58's fk46-qwen3-next). Session 62 (s62-h100/, cold): 3 rounds in 1,291 s (round 1 580 s, later ones about 350 s,
    # 47 s of timed runs a process, most of it throughput); the three throughput workloads inside the floor, batch-32
    # latency too noisy: so only the latency workloads now (--workloads latency: an estimated 75 s a process),
    # 8 rounds planned, --time-budget stops them where the hold ends
    # (VLLM_CUSTOM_SCOPES_FOR_PROFILING is one of vLLM's compile-cache factors: a jitpack of this hold serves only
    # holds that set it too)
    lane V-0 31 vllm 0 STEPS="adapter" ADAPTER_SC=fk46-mamba2 ADAPTER_SIDES=with ROUNDS=8 \
      ADAPTER_ARGS="--smoke --workloads latency" \
      VLLM_CUSTOM_SCOPES_FOR_PROFILING=1 FK_BIND_CPUS="$(survey_cpus)" ;;
  s59-mamba2-warm-h100)  # one GPU, vLLM, a short hold: fk46-mamba2's compile caches and float32 reference for
    # s54-mamba2-h100 (one passthrough A/B, one process a side, compiled, --smoke, the same vLLM variables, unbound so
    # the cold compile has every CPU), then `jitpack vllm` into .stage/jit-vllm-mamba2/; its correctness is judged
    lane V-0 31 vllm 0 STEPS="warm" ADAPTER_SC=fk46-mamba2 ADAPTER_ARGS="--smoke" VLLM_CUSTOM_SCOPES_FOR_PROFILING=1 ;;
  s59-captures)  # one GPU, no engine, a short hold: issue 32's last two captures (ran in session 61)
    # with only the libraries they import staged (extra-transformers-science.txt less spconv, cumm, gsplat,
    # torch-pointcloud, ocnn, pccm, ccimport: 90 MiB, 2 calls)
    capture_lane 0 "fk46-instantngp fk46-openfold3" ;;
  s53-fullsize-h100)  # one GPU, vLLM: issue 31's first full-size A/B (FastKernels' three throughput workloads at
    # every request, not --smoke): the compiled fk46-llama-3.1 Triton A/B, one timed repeat after the warm-up pass
    # (docs/design/suite-time.md: at an assumed 20k tok/s about 5 minutes a process with the short warm-up), 3 interleaved rounds under
    # the hold's --time-budget: round 1 measures the real rate, and a later hold at the same commit, given this
    # folder back, runs the rounds that did not fit (fk keeps the ones that ran)
    # (a slower rate: --timeout 1500 lets the baseline finish and measure it even if the candidate is cut)
    # (--warmup-share 0.25: each throughput warm-up pass over its first 250 requests; a timed pass that compiled a
    # Triton kernel runs again)
    lane V-0 31 vllm 0 STEPS="split" SC=fk46-llama-3.1 AB_SIZE="" AB_INTERLEAVE=3 \
      AB_ARGS="--repeats 1 --warmup-share 0.25 --timeout 1500" ;;
  s45-kimi-h200)  # one H200, vLLM: issue 30's Kimi-Linear leftovers, wrong-gdn (eager, correctness only: must FAIL)
    # and the passthrough (compiled, correctness only: must PASS with vLLM's KDA kernels proven by calls)
    lane V-0 30 vllm 0 STEPS="linear" LINEAR=fk46-kimi-linear LINEAR_STEPS="wrong pass" ;;
  s41-sglang)  # a later SGLang hold: issue 31's suite (`fk run --suite fk46-llm --smoke`, Triton, SGLang's default
    # graphs, one round) with its scenarios side by side on the four GPUs, largest first, alone on the machine: its
    # wall time is the bar's. SGLang serves 10 of the suite's scenarios; their committed smoke A/Bs add up to about 101
    # GPU-minutes, about 25 minutes on four GPUs, so nothing else runs in this hold (vLLM's 14, about 145 GPU-minutes,
    # fit no hold)
    lane S-S 31 sglang 0,1,2,3 STEPS="suite" SUITE_GPUS="0 1 2 3" ;;
  s42-vllm)  # a later vLLM hold: issue 31's compiled Llama Triton A/B with its profiled step (the bar: 80% of the delta
    # named; session 35's one named 1%, before the profile's warm-up and before the profiled batch became 32 x 16) and the decode A/A and passthrough at 5 rounds
    # (session 33's interval reached 2.6% past its 1.60% floor), side by side (fk46-mamba2's pair moved to s41-vllm)
    (lane V-0 31 vllm 0 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=aa) &
    (lane V-1 31 vllm 1 STEPS="adapter" ADAPTER_SC=llama31-8b-decode ADAPTER_SIDES=pass) &
    (lane V-2 31 vllm 2 STEPS="split" SC=fk46-llama-3.1 AB_INTERLEAVE=0) &
    (lane V-3 31 vllm 3 STEPS="checkc" CAPTURE=fk46-llama-3.1) &
    wait ;;
  s34-transformers)  # issue 32's GPU captures, a 4-GPU hold with no engine (stage extra-transformers.txt, -science,
    # -recsys and -fla first; `fk_gpu.sh transformers setup`): capture, Triton A/B, wrong-gemm, passthrough per host
    (lane T-0 32 transformers 0 STEPS="hosts" HOSTS="fk46-mobilenetv4 fk46-efficientnetv2 fk46-yolov10 fk46-lightgcn \
       fk46-pi0 fk46-dp3 fk46-dlrmv2") &
    (lane T-1 32 transformers 1 STEPS="hosts" HOSTS="fk46-sdxl fk46-flux.1-dev") &
    (lane T-2 32 transformers 2 STEPS="hosts" HOSTS="fk46-hunyuanvideo-1.5 fk46-rwkv-7 fk46-gla fk46-retnet") &
    (lane T-3 32 transformers 3 STEPS="hosts" HOSTS="fk46-3dgs fk46-instantngp fk46-pointtransformerv3 \
       fk46-openfold3") &
    wait ;;
  jitpack)  # the JIT and compile caches (and fk's float32 references) for the next hold, in parts of 15 MB into $OUT:
    # a call of its own after the last `pack` (what comes back is 8 files, 64 MiB a call). Keep them under .stage/jit-ENGINE
    # here; the next hold copies them to /tmp/fkstage/jit before `fk_gpu.sh ENGINE setup`, which restores them
    bash "$HERE/fk_gpu.sh" "${2:-vllm}" jitpack > /dev/null && cp "$ROOT"/jit/jit.tgz.part* "${OUT:?}/" && ls -la "$OUT" ;;
  wait)  # wait SECONDS: sleep on the machine until no lane's issue script runs, nor a case that starts lanes (its CPU
    # survey first: session 62's launching call found no issue script yet and came back after 5 s), or SECONDS pass;
    # then each lane's last lines
    end=$(( $(date +%s) + ${2:-560} )); sleep 5
    busy() { pgrep -af "reports/gpu/(issue[0-9]+|lanes_x4)\.sh" | grep -qvE "lanes_x4\.sh (wait|pack|jitpack)( |$)"; }
    while [ "$(date +%s)" -lt "$end" ] && busy; do sleep 10; done
    date -u; for f in "$ROOT"/i*/*/lane-*.log; do [ -f "$f" ] && { echo "== $f"; tail -n 3 "$f" | cut -c1-300; }; done
    exit 0 ;;
  pack)
    for issue in 29 30 31 32 33; do
      for engine in vllm sglang transformers; do
        [ -d "$ROOT/i$issue/$engine" ] && (. "$HERE/hold_env.sh" "i$issue" "$engine" && hold_pack > /dev/null)
      done
    done
    cp "$ROOT/host-topology.txt" "${OUT:?}/" 2>/dev/null
    cp "$ROOT/op-overhead.txt" "$ROOT/vcpu-speed.txt" "$OUT/" 2>/dev/null
    # what a cold first engine start compiles (session 48: a silent 57-102 s after vLLM's graph capture, on the first
    # process of a fresh machine only): the JIT caches it may fill, their sizes and newest files, to decide what to
    # carry from one hold to the next
    { du -sh ~/.cache/flashinfer ~/.triton/cache ~/.cache/vllm /tmp/fk-models/vllm-cache/* 2>/dev/null
      find ~/.cache/flashinfer ~/.triton/cache -maxdepth 4 -newer "$ROOT" 2>/dev/null | head -60; } > "$OUT/jit-caches.txt"
    ls -la "${OUT:?}"
    tail -n 3 "$ROOT"/i*/*/lane-*.log ;;
  *) echo "usage: lanes_x4.sh transformers|vllm|sglang|pair-transformers|pair-vllm|s31-vllm|s31-sglang|s32-vllm|s33-vllm|s33-sglang|s34-sglang|s34-transformers|s35-vllm|s35-sglang|s36-vllm|s36-sglang|s37-vllm|s37-sglang|s38-transformers|s38-sglang|s39-sglang|s39-transformers|s40-vllm|s40b-vllm|s41-vllm|s41-h200|s42-h200|s42-h200x2|s62-hosts-ab-a|s62-hosts-ab-b|s62-hf-hosts|s62-sglang-diffusion|s42-mixtral-x2|s42-mixtral-x4|s43-mixtral-sglang-x4|s43-mix-vllm|s43-mix-sglang|s44-mix-vllm-x4|s45-mix-vllm-x4|s46-qwen3-next-x4|s44-qwen3-next-x4|s43-mixtral-sglang-x2|s44-decode-x2|s45-kimi-h200|s47-h200|s48-h100|s49-h100|s50-h100|s50-short-h100|s51-rounds-h100|s52-prefill-h100|s51-sglang-h100|s52-linear-h100|s54-mamba2-h100|s59-mamba2-warm-h100|s59-captures|s53-fullsize-h100|s41-sglang|s42-vllm|wait SECONDS|pack|jitpack [ENGINE]"; exit 2 ;;
esac
