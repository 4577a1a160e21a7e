#!/bin/bash
# Session 7, hold 2, started during the A/A of hold2.sh when the hold's time showed the 3-round plan could not finish
# (cold start 259 s, a float32 reference run per fk-slow run): stop reports/deltas.sh (its running A/A goes on to the
# end), then fk-slow at 2 us and at 0 us with 2 interleaved rounds each (2 us first: the hold may end first), and
# fk compare against the 3-round A/A. Started again (this version) while waiting on the A/A's float32 reference run.
set -u
cd /tmp/fk-work
export PYTHONPATH=/tmp/fk-site/vllm FK_VLLM_PYTHONPATH=/tmp/fk-site/vllm PYTHONUNBUFFERED=1
while pgrep -f 'deltas/a[a]' > /dev/null; do sleep 5; done
echo "=== A/A done $(date -u +%H:%M:%S)"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 > deltas/gpu-clocks-slow.csv 2>&1 & SMI=$!
FK="python3 -m fk_adapters.cli.main"
IL="--engine vllm --scenario llama31-8b-decode --interleave 2 --timeout 900 --model-cache /tmp/fk-models"
FK_SLOW_US=2 $FK run --plugins slow $IL --out deltas/slow-2us
FK_SLOW_US=0 $FK run --plugins slow $IL --out deltas/slow-0us
$FK compare deltas/slow-0us/results.json deltas/slow-2us/results.json --aa deltas/aa/results.json --threshold 0.01 \
  --out deltas/compare-slow-2us > /dev/null
echo "fk compare slow-0us vs. slow-2us: exit $?"
kill $SMI
echo "=== rest done $(date -u +%H:%M:%S)"
