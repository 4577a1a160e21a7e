#!/bin/bash
# Trustworthy deltas, end to end, on one machine: the interleaved A/A (its noise floor), a second A/A (the A/A pair
# fk compare must call unchanged), then fk-slow at each delay of $SLOW_US (a known slowdown fk compare must call a
# regression). Every compare has the first A/A as BASE (main without the kernel) and as the noise floor (--aa).
# A float32 reference run (bf16 runs that fail the fixed limits need one) is made once: later runs reuse the first
# one made (--reference-from). SIZE is fk run's size flag (default --quick; SIZE= for the scenario's full
# workloads); THRESHOLD is fk compare's --threshold (default 0.02).
#   OUT=DIR SC=SCENARIO [ENGINE=vllm] [ROUNDS=5] [SIZE=--quick] [SLOW_US="2 3"] [THRESHOLD=0.02] [FK="fk"] [EXTRA=...] \
#     bash reports/deltas.sh
set -u
: "${OUT:?}" "${SC:?}"
ENGINE=${ENGINE:-vllm}; FK=${FK:-fk}
IL="--engine $ENGINE --scenario $SC --interleave ${ROUNDS:-5} ${SIZE---quick} --timeout 900 ${EXTRA:-}"
compare() {  # compare NAME-OF-HEAD: fk compare aa -> HEAD, the A/A as the noise floor
  $FK compare "$OUT/aa/results.json" "$OUT/$1/results.json" --aa "$OUT/aa/results.json" \
    --threshold "${THRESHOLD:-0.02}" --out "$OUT/compare-$1" > /dev/null
  echo "fk compare aa vs. $1: exit $?"
}
reference() {  # --reference-from the first earlier run that made a float32 reference run, if any
  for d in "$OUT"/*/; do
    if compgen -G "$d/logs/*/reference/result.json" > /dev/null; then echo "--reference-from ${d%/}"; return; fi
  done
}
$FK run --aa $IL --out "$OUT/aa"
$FK run --aa $IL $(reference) --out "$OUT/aa-again"
compare aa-again
for us in ${SLOW_US:-2 3}; do
  FK_SLOW_US=$us $FK run --plugins slow $IL $(reference) --out "$OUT/slow-${us}us"
  compare "slow-${us}us"
done
