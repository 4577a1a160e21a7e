#!/bin/bash
# Trustworthy deltas, end to end: the machine's interleaved A/A (its noise floor), fk-slow with no delay (BASE), fk-slow at
# each delay of $SLOW_US (a known slowdown fk compare must call a regression), then fk-slow with no delay again (an A/A
# pair of plugin runs that fk compare must call unchanged). Same kernels on both sides of every compare: only the delay
# differs. The fk-slow runs reuse the A/A run's float32 reference run, when it made one (--reference-from): the
# same job, so one float32 run serves them all. SIZE is fk run's size flag (default --quick; SIZE= for the scenario's full workloads); THRESHOLD is fk
# compare's --threshold (default 0.02).
#   OUT=DIR SC=SCENARIO [ENGINE=vllm] [ROUNDS=5] [SIZE=--quick] [SLOW_US="3 10"] [THRESHOLD=0.02] [FK="fk"] [EXTRA=...] \
#     bash reports/deltas.sh
set -u
: "${OUT:?}" "${SC:?}"
ENGINE=${ENGINE:-vllm}; FK=${FK:-fk}
IL="--engine $ENGINE --scenario $SC --interleave ${ROUNDS:-5} ${SIZE---quick} --timeout 900 ${EXTRA:-}"
compare() {  # compare NAME-OF-BASE NAME-OF-HEAD
  $FK compare "$OUT/$1/results.json" "$OUT/$2/results.json" --aa "$OUT/aa/results.json" \
    --threshold "${THRESHOLD:-0.02}" --out "$OUT/compare-$2" > /dev/null
  echo "fk compare $1 vs. $2: exit $?"
}
$FK run --aa $IL --out "$OUT/aa"
IL="$IL --reference-from $OUT/aa"
FK_SLOW_US=0 $FK run --plugins slow $IL --out "$OUT/slow-0us"
for us in ${SLOW_US:-3 10}; do
  FK_SLOW_US=$us $FK run --plugins slow $IL --out "$OUT/slow-${us}us"
  compare slow-0us "slow-${us}us"
done
FK_SLOW_US=0 $FK run --plugins slow $IL --out "$OUT/slow-0us-again"
compare slow-0us slow-0us-again
