#!/bin/bash
# GPU evidence for the vLLM adapter. Run on the lent GPU machine from the repository root,
# after staging vLLM 0.26.0 with ../shared/device/stage.py vllm (it lands in /tmp/fk-site/vllm):
#   bash reports/gpu/vllm_gpu.sh STEP [STEP ...]     STEP: setup smoke aa passthrough triton wrong
# Results (results.json + report.md per step, engine logs as a tarball) are copied to $OUT.
set -u
export PYTHONPATH=/tmp/fk-site/vllm PYTHONUNBUFFERED=1
OUTDIR=${OUT:-/tmp/fk-out}; WORK=/tmp/fk-work; MODELS=/tmp/fk-models
mkdir -p "$OUTDIR" "$WORK"
FK="python3 -m fk_adapters.cli.main"
SC=llama31-8b-4l

keep() {  # keep results + report of one step under $OUT, logs in one tarball
  cp "$WORK/$1/results.json" "$OUTDIR/$1-results.json" 2>/dev/null
  cp "$WORK/$1/report.md" "$OUTDIR/$1-report.md" 2>/dev/null
  tar czf "$OUTDIR/$1-logs.tgz" -C "$WORK/$1" logs 2>/dev/null
}

for step in "$@"; do
  echo "=== $step $(date -u +%H:%M:%S)"
  case $step in
    setup)
      python3 -m pip install -q --no-deps --no-build-isolation --no-index --upgrade --target /tmp/fk-site/vllm \
        . plugins/fk-triton plugins/fk-passthrough plugins/fk-wrong 2>&1 | grep -v -i warning
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
      $FK doctor --engine vllm | tee "$OUTDIR/doctor.txt"
      $FK plugins ;;
    smoke)
      $FK run --plugins triton --scenario tiny-gemma --dtype bfloat16 --quick --out "$WORK/smoke" \
        --model-cache $MODELS --timeout 500; keep smoke ;;
    aa)
      $FK run --aa --scenario $SC --out "$WORK/aa" --model-cache $MODELS --timeout 560; keep aa ;;
    passthrough|triton|wrong)
      $FK run --plugins "$step" --scenario $SC --out "$WORK/$step" --model-cache $MODELS --timeout 560 \
        --allow-unexercised; keep "$step" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  echo "=== $step done $(date -u +%H:%M:%S) rc=$?"
done
