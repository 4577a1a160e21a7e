#!/bin/bash
# Issue 33 (tensor parallelism) on a lent machine of 2 or 4 GPUs (kind nvidia-h100-x2 / nvidia-h200-x2 / -x4), one
# engine per hold (vllm 0.26.0 or sglang 0.5.15), after ../shared/device/stage.py ENGINE and its install:
#   bash reports/gpu/fk_gpu.sh ENGINE setup                      # fk and its plugins into the staged site
#   setsid nohup bash reports/gpu/issue33.sh ENGINE runs > /tmp/fk-work/i33-ENGINE.log 2>&1 < /dev/null &
#   bash reports/gpu/issue33.sh ENGINE pack                      # /tmp/fk-work/i33/ENGINE (no weights) -> $OUT
# Keep a polling call in flight while the runs go: an idle machine is taken back after ~30 s.
# Steps ($STEPS, in this order by default; each independent of a failed one before it), at TP=$TP (2 by default):
#   capture   fk capture of fk46-llama-3.1-tp$TP, profiled: each rank's sharded shapes, the all-reduce calls, the
#             device time per op family (all-reduce included)
#   triton    the Triton plugin vs. stock on fk46-llama-3.1-tp$TP and fk46-mixtral-tp$TP, compiled, --smoke,
#             $ROUNDS interleaved rounds: PASS with every slot proven on every rank (profiler names per rank)
#   pass      passthrough vs. stock (all_reduce routed through fk), same scenarios and rounds: the adapter's cost at TP
#             (PASS_REUSE=1: against the triton run's baseline instead, one engine start)
#   wrong     wrong-all-reduce, --correctness-only, --baseline-from the triton run (WRONG_BASE=pass: the pass run's): must FAIL
#   check     fk check of passthrough and wrong-all-reduce on the captured shapes (all_reduce judged, not timed)
. "$(dirname "$0")/hold_env.sh" i33 "$1"; shift
TP=${TP:-2}
ROUNDS=${ROUNDS:-3}
SCENARIOS=${SCENARIOS:-"fk46-llama-3.1-tp$TP fk46-mixtral-tp$TP"}
RUN="$FK run --engine $ENGINE --model-cache $MODELS --timeout ${TIMEOUT:-900} --allow-uncovered"

case $1 in
  runs)
    cd "$W" || exit 1
    nvidia-smi -L
    for step in ${STEPS:-capture triton wrong pass check}; do
      echo "=== $step $(date -u +%H:%M:%S)"
      case $step in
        capture)
          $FK capture --engine "$ENGINE" --scenario "fk46-llama-3.1-tp$TP" --profile --smoke --model-cache $MODELS \
            --timeout 1200 --out "$W/fk46" ;;
        triton)
          for S in $SCENARIOS; do
            $RUN --plugins triton --scenario "$S" --smoke --interleave "$ROUNDS" --out "$W/ab-triton-$S" | tail -1
          done ;;
        wrong)
          for S in $SCENARIOS; do
            $RUN --plugins wrong-all-reduce --scenario "$S" --smoke --correctness-only \
              --baseline-from "$W/ab-${WRONG_BASE:-triton}-$S" --out "$W/wrong-all-reduce-$S" | tail -1
          done ;;
        pass)  # PASS_REUSE=1: one passthrough process against the triton run's baseline (one engine start, no rounds)
          for S in $SCENARIOS; do
            if [ -n "${PASS_REUSE:-}" ]; then sides="--baseline-from $W/ab-triton-$S"; else sides="--interleave $ROUNDS"; fi
            $RUN --plugins passthrough --scenario "$S" --smoke $sides --out "$W/ab-pass-$S" | tail -1
          done ;;
        check)
          $FK check --engine "$ENGINE" --plugins passthrough,wrong-all-reduce,triton --slots all_reduce,gemm,rms_norm \
            --workload "$W/fk46/fk46-llama-3.1-tp$TP/$ENGINE.json" --max-shapes 4 --timeout 600 \
            --out "$W/check-tp$TP" | tail -3 ;;
      esac
      echo "=== $step done rc=$? $(date -u +%H:%M:%S)"
    done
    echo "=== all done" ;;
  pack) hold_pack ;;
  *) echo "usage: issue33.sh ENGINE runs|pack"; exit 2 ;;
esac
