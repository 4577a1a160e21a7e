#!/bin/bash
# Issue 30 (paged_attention; the linear-attention / SSM slots once they join the catalog) on the lent GPU, one engine
# per hold (vllm 0.26.0 or sglang 0.5.15), after ../shared/device/stage.py ENGINE and its install:
#   bash reports/gpu/fk_gpu.sh ENGINE setup                      # fk and its plugins into the staged site
#   setsid nohup bash reports/gpu/issue30.sh ENGINE runs > /tmp/fk-work/i30-ENGINE.log 2>&1 < /dev/null &
#   bash reports/gpu/issue30.sh ENGINE pack                      # /tmp/fk-work/i30/ENGINE (no weights) -> $OUT
# Steps ($STEPS, in this order by default, each independent of a failed one before it):
#   gputests  the natives of every slot, the Triton attention and recurrent kernels against the references (FLA
#             autotunes its kernels on first use: minutes) -> gputests.txt; $GPUTESTS_FILES, $GPUTESTS_K pick them,
#             $GPUTESTS_DIRS the engine's test folder (default tests/engines/ENGINE; " " for none)
#   tiny      the Triton plugin A/B on tiny-llama, bf16, compiled + CUDA graphs: attention enters and runs
#   capture   $CAPTURE (default fk46-llama-3.1) served eagerly, --smoke, --profile: slot calls, shapes, coverage
#   check     the Triton and passthrough paged_attention and gemm against the engine's own kernels on those shapes
#             ($WORKLOAD: another capture's file)
#   ab        the Triton plugin A/B on $SC (default fk46-llama-3.1; --smoke, compiled + graphs, $AB_INTERLEAVE rounds)
#   wrong     fk-wrong's wrong-attention (eager: not graph safe) and wrong-gemm, correctness only: both must FAIL
#             (wrong-gemm and pass reuse the baseline runs of $AB_DIR, default ab's)
#   pass      the passthrough plugin against ab's baseline (correctness only): must PASS with its natives proven
#   linear    the linear-attention / SSM slots on each of $LINEAR (default fk46-mamba2 fk46-qwen3-next), the parts in
#             $LINEAR_STEPS (default all): capture with --profile (coverage), fk check of the slots on its shapes, the
#             Triton A/B (compiled + graphs; $LINEAR_WORKLOAD: an earlier capture to check), fk-wrong's wrong-ssd + wrong-gated-norm (Mamba2) / wrong-gdn (eager:
#             not graph safe) and passthrough (correctness only, against the A/B's baseline)
#   moe       issue 29's leftovers: $MOE (default fk46-mixtral) captured with --profile (coverage without fk's value
#             statistics in the profile), then fused_moe and gemm checked on its shapes
. "$(dirname "$0")/hold_env.sh" i30 "$1"; shift
SC=${SC:-fk46-llama-3.1}
RUN="$FK run --engine $ENGINE --model-cache $MODELS --timeout 900 --allow-uncovered"

case $1 in
  runs)
    cd "$W" || exit 1
    for step in ${STEPS:-gputests capture check ab wrong pass moe}; do
      echo "=== $step $(date -u +%H:%M:%S)"
      case $step in
        gputests)
          (cd "$REPO" && timeout ${GPUTESTS_S:-600} python3 -m pytest -q -p no:cacheprovider -m gpu \
            --continue-on-collection-errors \
            ${GPUTESTS_FILES:-tests/plugins/test_triton_attention.py tests/plugins/test_triton_linear_attention.py} \
            ${GPUTESTS_DIRS-tests/engines/$ENGINE} -k "${GPUTESTS_K:-natives or test_triton_attention or linear}" \
            2>&1 | tail -30) \
            > "$W/gputests.txt"
          tail -3 "$W/gputests.txt" ;;
        tiny)
          $RUN --plugins triton --scenario tiny-llama --dtype bfloat16 --quick --interleave 0 --out "$W/tiny" ;;
        capture)
          for s in ${CAPTURE:-$SC}; do
            $FK capture --engine "$ENGINE" --scenario "$s" --profile --smoke --model-cache $MODELS --timeout 900 \
              --out "$W/fk46"
          done
          $FK coverage --results "$W/fk46" --out "$W/fk46" | tail -1 ;;
        check)
          $FK check --engine "$ENGINE" --plugins triton,passthrough --slots paged_attention,gemm \
            --workload "${WORKLOAD:-$W/fk46/$SC/$ENGINE.json}" --max-shapes ${MAX_SHAPES:-8} --timeout 600 --out "$W/check" ;;
        ab)
          $RUN --plugins triton --scenario "$SC" --smoke --interleave ${AB_INTERLEAVE:-0} --out "$W/ab-triton" ;;
        wrong)
          $RUN --plugins wrong-attention --scenario "$SC" --mode eager --smoke --correctness-only \
            --out "$W/ab-wrong-attention"
          $RUN --plugins wrong-gemm --scenario "$SC" --smoke --correctness-only --baseline-from "${AB_DIR:-$W/ab-triton}" \
            --out "$W/ab-wrong-gemm" ;;
        pass)
          $RUN --plugins passthrough --scenario "$SC" --smoke --correctness-only --baseline-from "${AB_DIR:-$W/ab-triton}" \
            --out "$W/ab-passthrough" ;;
        linear)
          for L in ${LINEAR:-fk46-mamba2 fk46-qwen3-next}; do
            case $L in *mamba*) WRONG="wrong-ssd wrong-gated-norm" ;; *) WRONG=wrong-gdn ;; esac
            for part in ${LINEAR_STEPS:-capture check ab wrong pass}; do
              case $part in
                capture) $FK capture --engine "$ENGINE" --scenario "$L" --profile --smoke --model-cache $MODELS \
                           --timeout 900 --out "$W/fk46" ;;
                check) $FK check --engine "$ENGINE" --plugins "triton,passthrough,${WRONG// /,}" \
                         --slots gated_delta_rule,gated_delta_rule_decode,ssd_chunk_scan,ssm_state_update,gated_rms_norm \
                         --workload "${LINEAR_WORKLOAD:-$W/fk46/$L/$ENGINE.json}" --max-shapes 4 --timeout 600 --out "$W/check-$L" ;;
                ab) $RUN --plugins triton --scenario "$L" --smoke --interleave 0 --out "$W/ab-triton-$L" ;;
                wrong) BASE=()  # the second wrong plugin reuses the first one's eager baseline
                       for w in $WRONG; do
                         $RUN --plugins $w --scenario "$L" --mode eager --smoke --correctness-only "${BASE[@]}" \
                           --out "$W/ab-$w-$L"
                         BASE=(--baseline-from "$W/ab-$w-$L")
                       done ;;
                pass) BASE=(); [ -d "$W/ab-triton-$L" ] && BASE=(--baseline-from "$W/ab-triton-$L")
                      $RUN --plugins passthrough --scenario "$L" --smoke --correctness-only "${BASE[@]}" \
                        --out "$W/ab-passthrough-$L" ;;
              esac
            done
          done
          $FK coverage --results "$W/fk46" --out "$W/fk46" | tail -1 ;;
        moe)
          M=${MOE:-fk46-mixtral}
          $FK capture --engine "$ENGINE" --scenario "$M" --profile --smoke --model-cache $MODELS --timeout 900 \
            --out "$W/fk46"
          $FK coverage --results "$W/fk46" --out "$W/fk46" | tail -1
          $FK check --engine "$ENGINE" --plugins triton,passthrough --slots fused_moe,gemm \
            --workload "$W/fk46/$M/$ENGINE.json" --max-shapes ${MAX_SHAPES:-8} --timeout 600 --out "$W/check-moe" ;;
      esac
      echo "=== $step done rc=$? $(date -u +%H:%M:%S)"
    done
    echo "=== all done" ;;
  pack) hold_pack ;;
  *) echo "usage: issue30.sh ENGINE runs|pack"; exit 2 ;;
esac
