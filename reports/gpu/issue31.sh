#!/bin/bash
# Issue 31 (performance that explains itself) on the lent GPU, one engine per hold (vllm 0.26.0 or sglang 0.5.15),
# after ../shared/device/stage.py ENGINE and its install:
#   bash reports/gpu/fk_gpu.sh ENGINE setup                      # fk and its plugins into the staged site
#   setsid nohup bash reports/gpu/issue31.sh ENGINE runs > /tmp/fk-work/i31-ENGINE.log 2>&1 < /dev/null &
#   bash reports/gpu/issue31.sh ENGINE pack                      # /tmp/fk-work/i31/ENGINE (no weights) -> $OUT
# Keep a polling call in flight while the runs go: an idle machine is taken back after ~30 s.
# Steps ($STEPS, in this order by default, each independent of a failed one before it):
#   suite     `fk run --suite fk46-llm --smoke` with the Triton plugin, compiled, one round (--interleave 0): the wall
#             time per phase of a whole suite (the report's "Where the wall time went"); bar: 25 minutes
#             ($SUITE_GPUS, e.g. "0 1 2 3": the scenarios side by side, one a GPU)
#   adapter   the adapter's cost: A/A, then passthrough, $ROUNDS (5) interleaved rounds each, on llama31-8b-decode and
#             llama31-8b-4l-prefill, compiled (vLLM) / default (SGLang): the passthrough's 95% interval (its report)
#             beside the A/A's, the floor of the same hold ($ADAPTER_SIDES: "aa", "pass" or both, the default; two
#             lanes of one machine can take one each; "with": one passthrough run with --with-aa, its A/A in the same
#             rounds, 3 processes a round instead of 4, and fk compare of the two written by fk run itself; $ADAPTER_GPUS, e.g. "0 1": `fk run --gpus`, the rounds after the
#             first side by side on those GPUs; $ADAPTER_ARGS: more `fk run` options, e.g. "--smoke" for fk46 scenarios)
#   warm      before timed lanes start side by side: one passthrough A/B of each $ADAPTER_SC, one process a side and
#             the float32 reference, untimed by anyone; every variant's compile caches (Inductor's, Triton's) are then
#             warm, so no lane's cold compile lands in another lane's timing (session 43: it did); REF_WARM=1 then
#             has the adapter step take its float32 reference from that run (no reference process while lanes time)
#   startup   one A/A pair of fk46-llama-3.1 (--smoke, one process a side) with vLLM's engine core in fk's driver
#             process (--no-multiprocessing) and one without: the wall-time tables say what the second process and
#             its import cost per start (a lever for the suite's 25 minutes)
#   checkc    `fk check` of the Triton plugin on $CAPTURE's captured shapes with both baselines: the engine's kernel
#             (eager) and the Inductor-compiled native forward (vLLM's compiled mode); which predicts the A/B's delta.
#             $WORKLOAD: an earlier capture's workload file instead of a fresh capture
#   split     the Triton A/B on $SC (compiled, $AB_INTERLEAVE rounds) with its profiled step: the report's "Where the
#             device time went" must name the kernels behind >= 80% of the delta. AB_SIZE="" (set, empty): at full
#             size, not --smoke (folder ab-triton-$SC-full); $AB_ARGS: more `fk run` options (e.g. --repeats 1)
. "$(dirname "$0")/hold_env.sh" i31 "$1"; shift
SC=${SC:-fk46-llama-3.1}
CAPTURE=${CAPTURE:-fk46-llama-3.1}
ROUNDS=${ROUNDS:-5}
RUN="$FK run --engine $ENGINE --model-cache $MODELS --timeout 900 --allow-uncovered"
GPUS_ARG=${ADAPTER_GPUS:+--gpus $ADAPTER_GPUS}
# $HOLD_END (epoch seconds, exported at launch: when the hold's device time runs out, less the pack's): the interleaved
# runs start no round that would end past it (`fk run --time-budget`), so what ran is judged, not lost
budget() { [ -n "${HOLD_END:-}" ] || return 0; local left=$(( HOLD_END - $(date +%s) )); echo "--time-budget $(( left > 60 ? left : 60 ))"; }

case $1 in
  runs)
    cd "$W" || exit 1
    for step in ${STEPS:-suite adapter checkc split}; do
      echo "=== $step $(date -u +%H:%M:%S)"
      case $step in
        suite)
          t0=$(date +%s)  # the device machine may lack /usr/bin/time
          $RUN --plugins triton --suite fk46-llm --smoke --interleave 0 --allow-unexercised \
            ${SUITE_GPUS:+--gpus $SUITE_GPUS} --out "$W/suite-fk46-llm" | tail -3
          echo "suite wall time: $(( $(date +%s) - t0 )) s" | tee "$W/suite-fk46-llm.time" ;;
        adapter)
          for S in ${ADAPTER_SC:-llama31-8b-decode llama31-8b-4l-prefill}; do
            WARM=(); [ -n "${REF_WARM:-}" ] && [ -d "$W/warm-$S" ] && WARM=(--reference-from "$W/warm-$S")
            if wants "${ADAPTER_SIDES:-aa pass}" aa; then
              $RUN --aa --scenario "$S" --interleave "$ROUNDS" $(budget) $GPUS_ARG ${ADAPTER_ARGS:-} "${WARM[@]}" \
                --out "$W/adapter-aa-$S" | tail -1
            fi
            if wants "${ADAPTER_SIDES:-aa pass}" with; then  # one run: the passthrough with the A/A of its rounds
              $RUN --plugins passthrough --scenario "$S" --interleave "$ROUNDS" --with-aa $(budget) $GPUS_ARG ${ADAPTER_ARGS:-} \
                "${WARM[@]}" --out "$W/adapter-with-aa-$S" | tail -2
            fi
            if wants "${ADAPTER_SIDES:-aa pass}" pass; then
              REF=("${WARM[@]}"); [ -z "${REF[*]}" ] && [ -f "$W/adapter-aa-$S/results.json" ] && \
                REF=(--reference-from "$W/adapter-aa-$S")
              $RUN --plugins passthrough --scenario "$S" --interleave "$ROUNDS" $(budget) $GPUS_ARG ${ADAPTER_ARGS:-} "${REF[@]}" \
                --out "$W/adapter-pass-$S" | tail -1
            fi
          done ;;
        warm)
          for S in ${ADAPTER_SC:-llama31-8b-decode llama31-8b-4l-prefill}; do
            $RUN --plugins passthrough --scenario "$S" --interleave 0 ${ADAPTER_ARGS:-} --out "$W/warm-$S" | tail -1
          done ;;
        startup)
          for mp in "" --no-multiprocessing; do
            $RUN --aa --scenario fk46-llama-3.1 --smoke --interleave 0 $mp --out "$W/startup-aa${mp:+-inproc}" | tail -1
          done ;;
        checkc)
          [ -n "${WORKLOAD:-}" ] || $FK capture --engine "$ENGINE" --scenario "$CAPTURE" --profile --smoke \
            --model-cache $MODELS --timeout 900 --out "$W/fk46"
          $FK check --engine "$ENGINE" --plugins triton,passthrough \
            --slots rms_norm,fused_add_rms_norm,silu_and_mul,rotary_embedding,gemm \
            --workload "${WORKLOAD:-$W/fk46/$CAPTURE/$ENGINE.json}" --max-shapes ${MAX_SHAPES:-6} --timeout 600 \
            --out "$W/check-$CAPTURE" | tail -3 ;;
        split)
          $RUN --plugins triton --scenario "$SC" ${AB_SIZE---smoke} --interleave "${AB_INTERLEAVE:-3}" ${AB_ARGS:-} \
            $( [ "${AB_INTERLEAVE:-3}" -gt 1 ] && budget ) --out "$W/ab-triton-$SC${AB_SIZE+-full}" | tail -1 ;;
      esac
      echo "=== $step done rc=$? $(date -u +%H:%M:%S)"
    done
    echo "=== all done" ;;
  pack) hold_pack ;;
  *) echo "usage: issue31.sh ENGINE runs|pack"; exit 2 ;;
esac
