#!/bin/bash
# Issue 29 (gemm and fused_moe slots) on the lent GPU, one engine per hold (vllm 0.26.0 or sglang 0.5.15), after
# ../shared/device/stage.py ENGINE and its install:
#   bash reports/gpu/fk_gpu.sh ENGINE setup                      # fk and its plugins into the staged site
#   setsid nohup bash reports/gpu/issue29.sh ENGINE runs > /tmp/fk-work/i29-ENGINE.log 2>&1 < /dev/null &
#   bash reports/gpu/issue29.sh ENGINE pack                      # /tmp/fk-work/i29/ENGINE (no weights) -> $OUT
# Steps ($STEPS, in this order by default, each independent of a failed one before it):
#   gputests  the GPU tests of the new slots (Triton kernels, the engine's natives) -> gputests.txt; $GPUTESTS_K picks
#             them (default: the natives and the Triton kernels, no test that starts an engine)
#   tiny      the Triton plugin A/B on tiny-llama, bf16, compiled + CUDA graphs: does every slot enter and run
#   capture   $CAPTURE (default fk46-mixtral fk46-llama-3.1) served eagerly with --smoke workloads and --profile:
#             each slot's calls and shapes, and device time per op family (coverage)
#   check     the Triton and passthrough gemm / fused_moe against the engine's own kernels on those shapes
#             ($WORKLOAD: another capture's file)
#   ab        the Triton plugin A/B on fk46-mixtral (--smoke, compiled + CUDA graphs, $AB_INTERLEAVE rounds: default
#             2; 0: one engine process a side); AB_MODE=eager: vLLM's eager mode (no torch.compile, no CUDA graphs)
#   quant     the Triton plugin on tiny-mixtral-fp8 (the engine quantizes the layers on load): gemm and fused_moe
#             must stay stock, counted as left stock with the reason, the unquantized lm_head routed ($QUANT_ARGS:
#             more `fk run` options, e.g. "--mode eager --correctness-only"; $QUANT_TAG: the out folder's suffix)
#   pass      the passthrough, correctness only, against ab's baseline runs (ab must have run in this hold)
#   wrong     fk-wrong's $WRONG (default wrong-moe, then wrong-gemm), correctness only, against ab's baseline runs
#             where ab ran in this hold (else its own): each must FAIL
#   tfx       (vllm's site only) fk-vllm-moe, vLLM's Triton fused MoE, in the transformers host on tiny-mixtral
. "$(dirname "$0")/hold_env.sh" i29 "$1"; shift
SC=${SC:-fk46-mixtral}
RUN="$FK run --engine $ENGINE --model-cache $MODELS --timeout 900"

case $1 in
  runs)
    cd "$W" || exit 1
    for step in ${STEPS:-gputests tiny capture check ab wrong tfx}; do
      echo "=== $step $(date -u +%H:%M:%S)"
      case $step in
        gputests)
          (cd "$REPO" && python3 -m pytest -q -p no:cacheprovider -m gpu tests/plugins/test_triton_gemm_moe.py \
            "tests/engines/$ENGINE" -k "${GPUTESTS_K:-natives or test_triton_gemm_moe}" 2>&1 | tail -30) > "$W/gputests.txt"
          tail -3 "$W/gputests.txt" ;;
        tiny)
          $RUN --plugins triton --scenario tiny-llama --dtype bfloat16 --quick --interleave 0 --allow-uncovered \
            --out "$W/tiny" ;;
        capture)
          for s in ${CAPTURE:-$SC fk46-llama-3.1}; do
            $FK capture --engine "$ENGINE" --scenario "$s" --profile --smoke --model-cache $MODELS --timeout 900 \
              --out "$W/fk46"
          done ;;
        check)
          $FK check --engine "$ENGINE" --plugins triton,passthrough --slots gemm,fused_moe \
            --workload "${WORKLOAD:-$W/fk46/$SC/$ENGINE.json}" --max-shapes ${MAX_SHAPES:-10} --timeout 600 --out "$W/check" ;;
        ab)
          $RUN --plugins triton --scenario $SC --smoke --interleave ${AB_INTERLEAVE:-2} --allow-uncovered \
            ${AB_MODE:+--mode $AB_MODE} --out "$W/ab-triton-$SC${AB_MODE:+-$AB_MODE}" ;;
        quant)
          $RUN --plugins triton --scenario tiny-mixtral-fp8 --quick --interleave 0 --allow-uncovered ${QUANT_ARGS:-} \
            --out "$W/quant-triton-tiny-mixtral-fp8${QUANT_TAG:+-$QUANT_TAG}" ;;
        pass)
          $RUN --plugins passthrough --scenario $SC --smoke --correctness-only --baseline-from "$W/ab-triton-$SC" \
            --allow-uncovered --out "$W/ab-passthrough-$SC" ;;
        wrong)
          BASE=(); [ -d "$W/ab-triton-$SC" ] && BASE=(--baseline-from "$W/ab-triton-$SC")  # else its own baseline runs
          for p in ${WRONG:-wrong-moe wrong-gemm}; do
            $RUN --plugins $p --scenario $SC --smoke --correctness-only "${BASE[@]}" --allow-uncovered --out "$W/ab-$p-$SC"
          done ;;
        tfx)
          [ "$ENGINE" = vllm ] && $FK run --engine transformers --plugins vllm-moe --scenario tiny-mixtral \
            --device cuda --dtype bfloat16 --quick --model-cache $MODELS --timeout 900 --out "$W/tfx-vllm-moe" ;;
      esac
      echo "=== $step done rc=$? $(date -u +%H:%M:%S)"
    done
    $FK coverage --results "$W/fk46" --out "$W/fk46" 2>&1 | tail -2
    echo "=== all done" ;;
  pack) hold_pack ;;
  *) echo "usage: issue29.sh ENGINE runs|pack"; exit 2 ;;
esac
