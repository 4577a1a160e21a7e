#!/bin/bash
# Issue 32 (all 46 running) on the lent GPU: the embedding models in vLLM's pooling runner, after
# ../shared/device/stage.py vllm and its install:
#   bash reports/gpu/fk_gpu.sh vllm setup
#   setsid nohup bash reports/gpu/issue32.sh vllm runs > /tmp/fk-work/i32-vllm.log 2>&1 < /dev/null &
#   bash reports/gpu/issue32.sh vllm pack                        # /tmp/fk-work/i32/vllm (no weights) -> $OUT
# The newly hosted architectures in the transformers host need no engine staged, only its libraries (diffusers,
# torch-geometric: reports/gpu/extra-transformers.txt, staged by `PART_MIB=22 bash reports/gpu/stage_extra.sh
# transformers`, 13 parts, 85 MiB in all):
#   bash reports/gpu/fk_gpu.sh transformers setup
#   CUDA_VISIBLE_DEVICES=N STEPS=hosts setsid nohup bash reports/gpu/issue32.sh transformers runs > /dev/null 2>&1 < /dev/null &
# Session 30's 3D / science hosts need extra-transformers-science.txt staged too (`PART_MIB=22 bash
# reports/gpu/stage_extra.sh transformers-science`, 189 MiB), then
#   HOSTS="fk46-3dgs fk46-instantngp fk46-openfold3 fk46-pointtransformerv3" STEPS=hosts ... (as above)
# DLRMv2 (session 31, torchrec) needs extra-transformers-recsys.txt staged: HOSTS=fk46-dlrmv2
# Steps ($STEPS, in this order by default):
#   hosts     $HOSTS (default fk46-pi0 fk46-mobilenetv4 fk46-efficientnetv2 fk46-yolov10 fk46-sdxl fk46-flux.1-dev
#             fk46-hunyuanvideo-1.5 fk46-lightgcn) in the
#             transformers host: captured with --profile (coverage), the Triton A/B, fk-wrong's wrong-gemm and the
#             passthrough against its baseline (correctness only), each scenario's weights deleted after it;
#             $HOST_STEPS (default "capture ab wrong", wrong including the passthrough) picks the parts
#   pooling   $POOLING (default fk46-bge-m3 fk46-colbertv2: sentence and per-token embeddings; fk46-whisper: the
#             transcription path, session 29) captured with --profile
#             (coverage), then the Triton plugin A/B and fk-wrong's wrong-gemm (correctness only, its baseline);
#             $POOLING_STEPS (default "capture ab wrong") picks the parts
#   diffusion (engine sglang) $DIFFUSION (default fk46-sdxl fk46-flux.1-dev) on SGLang's diffusion runtime (needs
#             extra-sglang-diffusion.txt staged): an A/B of each of $DIFFUSION_PLUGINS (default "passthrough
#             triton"), one round, --smoke, the later plugins against the first one's baseline
. "$(dirname "$0")/hold_env.sh" i32 "$1"; shift
RUN="$FK run --engine $ENGINE --model-cache $MODELS --timeout 900 --allow-uncovered"

per_scenario() {  # per_scenario SCENARIO STEPS WRONG_PLUGINS: of "capture ab wrong", the steps asked for
  local S=$1
  if wants "$2" capture; then
    $FK capture --engine "$ENGINE" --scenario "$S" --profile --smoke --model-cache $MODELS --timeout 900 --out "$W/fk46"
  fi
  if wants "$2" ab; then
    $RUN --plugins triton --scenario "$S" --smoke --interleave 0 --out "$W/ab-triton-$S"
  fi
  if wants "$2" wrong; then  # against the A/B's baseline, correctness only
    for P in $3; do
      $RUN --plugins $P --scenario "$S" --smoke --correctness-only --baseline-from "$W/ab-triton-$S" --out "$W/ab-$P-$S"
    done
  fi
}

case $1 in
  runs)
    cd "$W" || exit 1
    for step in ${STEPS:-pooling}; do
      echo "=== $step $(date -u +%H:%M:%S)"
      case $step in
        hosts)
          for S in ${HOSTS:-fk46-pi0 fk46-mobilenetv4 fk46-efficientnetv2 fk46-yolov10 fk46-sdxl fk46-flux.1-dev fk46-hunyuanvideo-1.5 fk46-lightgcn}; do
            per_scenario "$S" "${HOST_STEPS:-capture ab wrong}" "wrong-gemm passthrough"
            rm -rf "${MODELS:?}"/*  # run each such lane with its own FK_HOLD_MODELS when other lanes share the machine
          done ;;
        pooling)
          for S in ${POOLING:-fk46-bge-m3 fk46-colbertv2 fk46-whisper}; do
            per_scenario "$S" "${POOLING_STEPS:-capture ab wrong}" wrong-gemm
          done ;;
        diffusion)
          for S in ${DIFFUSION:-fk46-flux.1-dev fk46-sdxl}; do  # FLUX first: no slot enters the fallback (SDXL)
            BASE=""  # the plugins after the first against its baseline run
            for P in ${DIFFUSION_PLUGINS:-passthrough triton}; do
              $RUN --plugins $P --scenario "$S" --smoke --interleave 0 --out "$W/diffusion-$P-$S" $BASE
              BASE="--baseline-from $W/diffusion-$P-$S"
            done
          done ;;
      esac
      echo "=== $step done rc=$? $(date -u +%H:%M:%S)"
    done
    $FK coverage --results "$W/fk46" --out "$W/fk46" 2>&1 | tail -2
    echo "=== all done" ;;
  pack) hold_pack ;;
  *) echo "usage: issue32.sh ENGINE runs|pack"; exit 2 ;;
esac
