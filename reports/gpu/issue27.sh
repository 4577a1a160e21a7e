#!/bin/bash
# Issues 27 and 28 on the lent GPU, SGLang 0.5.15 (after ../shared/device/stage.py sglang and its install):
# - passthrough: the refactored driver skeleton and install helper (issue 28) serving llama31-8b-4l in SGLang's
#   default mode (CUDA graphs), one pair: must PASS with its kernels exercised;
# - oom: fk-wrong's oom-late, a correct silu_and_mul that asks for 64 TiB of GPU memory once the run's correctness
#   results are kept: the candidate dies of a real CUDA out-of-memory error in its throughput phase, and the row must
#   keep its correctness and load records (issue 27, point 2-3);
# - TERM, KILL: fk-wrong's hang (a silu_and_mul that never returns) against oom's baseline; fk is sent the signal
#   20 s after the candidate's engine processes loaded the plugin; no engine process and no GPU process may be left
#   10 s later (issue 27, point 1).
# Run from the repository root:
#   bash reports/gpu/fk_gpu.sh sglang setup       # fk and its plugins into the staged site
#   setsid nohup bash reports/gpu/issue27.sh runs > /tmp/fk-work/i27.log 2>&1 < /dev/null &
#   bash reports/gpu/issue27.sh pack              # /tmp/fk-work/i27 (no weights) -> $OUT/i27.tgz
set -u
export PYTHONPATH=/tmp/fk-site/sglang PYTHONUNBUFFERED=1 FK_SGLANG_PYTHONPATH=/tmp/fk-site/sglang
export FK_WEIGHTS_PYTHONPATH=/tmp/fk-site/fk FK_TRANSFORMERS_PYTHONPATH=/tmp/fk-site/fk
W=/tmp/fk-work/i27; mkdir -p "$W"
SC=llama31-8b-4l
RUN="python3 -m fk_adapters.cli.main run --engine sglang --scenario $SC --quick --interleave 0 \
     --model-cache /tmp/fk-models --timeout 900 --allow-uncovered"

survivors() {  # live processes started for an engine run under $1 (fk gives each FK_RUN_DIR=<its run folder>)
  grep -l "FK_RUN_DIR=$1" /proc/[0-9]*/environ 2>/dev/null | wc -l
}

stopped() {  # fk run with the hanging plugin, sent signal $1 once the candidate's engine loaded it
  local sig=$1 out=$W/hang-$1
  $RUN --mode eager --plugins hang --baseline-from "$W/oom" --out "$out" > "$out.log" 2>&1 &
  local pid=$! loads=$out/logs/$SC/candidate/loads
  for _ in $(seq 600); do [ "$(ls "$loads" 2>/dev/null | wc -l)" -ge 2 ] && break; sleep 1; done
  sleep 20
  local before; before=$(survivors "$out/logs")
  local gpu_before; gpu_before=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)
  local t0; t0=$(date +%s.%N)
  kill -"$sig" $pid; wait $pid; local rc=$?
  local n=0
  for _ in $(seq 40); do n=$(survivors "$out/logs"); [ "$n" = 0 ] && break; sleep 0.25; done
  local t1; t1=$(date +%s.%N)
  echo "SIG$sig: fk exit $rc; load records $(ls "$loads" | wc -l); engine processes before $before, after $n" \
       "($(python3 -c "print(f'{$t1 - $t0:.1f}')") s after the signal); GPU processes before $gpu_before," \
       "10 s later $(sleep 10; nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)" | tee "$out.check.txt"
  tail -2 "$out.log" >> "$out.check.txt"
}

case $1 in
  runs)
    cd "$W" || exit 1
    for step in ${STEPS:-passthrough oom TERM KILL}; do
      echo "=== $step $(date -u +%H:%M:%S)"
      case $step in
        passthrough) $RUN --plugins passthrough --out "$W/passthrough" ;;
        oom) $RUN --mode eager --plugins oom-late --out "$W/oom" ;;
        TERM|KILL) stopped "$step" ;;
      esac
      echo "=== $step done rc=$? $(date -u +%H:%M:%S)"
    done
    echo "=== all done" ;;
  pack)
    mkdir -p "${OUT:?}" && tar czf "$OUT/i27.tgz" --exclude='*.safetensors' --exclude='*.trace.json*' \
      -C /tmp/fk-work i27 i27.log && ls -la "$OUT/i27.tgz" ;;
esac
