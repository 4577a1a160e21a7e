#!/bin/bash
# Session 8, hold 1, last call: the hold ends before deltas.sh's slow-0us-again (3 rounds) could finish, so stop
# deltas.sh after its slow-2us run (the fk run itself goes on), compare slow-0us vs. slow-2us as deltas.sh does, run
# slow-0us-again with 2 rounds, compare slow-0us vs. slow-0us-again, and pack whatever exists by $DEADLINE seconds.
set -u
export PYTHONPATH=/tmp/fk-site/vllm FK_VLLM_PYTHONPATH=/tmp/fk-site/vllm PYTHONUNBUFFERED=1
D=/tmp/fk-work/deltas; FK="python3 -m fk_adapters.cli.main"; N=deltas
pkill -f "reports/$N.sh"; echo "stopped deltas.sh $(date -u +%H:%M:%S)"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 > $D/gpu-clocks-finish.csv 2>&1 & SMI=$!
compare() { $FK compare $D/$1/results.json $D/$2/results.json --aa $D/aa/results.json --threshold 0.01 --out $D/compare-$2 \
  > /dev/null; echo "fk compare $1 vs. $2: exit $?"; }
(
  cd /tmp/fk-work/vllm
  while pgrep -f "out $D/slow-2us" > /dev/null; do sleep 5; done
  echo "slow-2us done $(date -u +%H:%M:%S)"; compare slow-0us slow-2us
  FK_SLOW_US=0 $FK run --plugins slow --engine vllm --scenario llama31-8b-decode --interleave 2 --timeout 900 \
    --model-cache /tmp/fk-models --reference-from $D/aa --out $D/slow-0us-again
  compare slow-0us slow-0us-again; echo FINISH-END
) >> /tmp/fk-work/finish.log 2>&1 &
JOB=$!
end=$((SECONDS + ${DEADLINE:-570}))
while kill -0 $JOB 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
kill $SMI; cat /tmp/fk-work/finish.log | grep -v "repeat\|correctness:"
cd /tmp/fk-work && tar czf $OUT/deltas.tgz --exclude='*.safetensors' --exclude=job.json --exclude='*.trace.json*' \
  --exclude='*.tgz' deltas run.log finish.log; ls -la $OUT; date -u +%H:%M:%S
