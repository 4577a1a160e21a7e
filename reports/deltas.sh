#!/bin/bash
# Trustworthy deltas, end to end: the machine's interleaved A/A (its noise floor), fk-slow with no delay twice (BASE,
# and an A/A pair of plugin runs that fk compare must call unchanged), then fk-slow at each delay of $SLOW_US (a known
# slowdown fk compare must call a regression). Same kernels on both sides of every compare: only the delay differs.
#   OUT=DIR SC=SCENARIO [ENGINE=vllm] [ROUNDS=5] [SIZE=--quick] [SLOW_US="3 10"] [FK="fk"] [EXTRA=...] bash reports/deltas.sh
set -u
: "${OUT:?}" "${SC:?}"
ENGINE=${ENGINE:-vllm}; FK=${FK:-fk}
IL="--engine $ENGINE --scenario $SC --interleave ${ROUNDS:-5} ${SIZE:---quick} --timeout 900 ${EXTRA:-}"
$FK run --aa $IL --out "$OUT/aa"
FK_SLOW_US=0 $FK run --plugins slow $IL --out "$OUT/slow-0us"
FK_SLOW_US=0 $FK run --plugins slow $IL --out "$OUT/slow-0us-again"
$FK compare "$OUT/slow-0us/results.json" "$OUT/slow-0us-again/results.json" --aa "$OUT/aa/results.json" \
  --out "$OUT/compare-0us-again" > /dev/null
echo "fk compare slow-0us vs. slow-0us-again: exit $?"
for us in ${SLOW_US:-3 10}; do
  FK_SLOW_US=$us $FK run --plugins slow $IL --out "$OUT/slow-${us}us"
  $FK compare "$OUT/slow-0us/results.json" "$OUT/slow-${us}us/results.json" --aa "$OUT/aa/results.json" \
    --out "$OUT/compare-${us}us" > /dev/null
  echo "fk compare slow-0us vs. slow-${us}us: exit $?"
done
