#!/bin/bash
# GPU evidence for the vLLM adapter. Run on the lent GPU machine from the repository root,
# after staging vLLM 0.26.0 with ../shared/device/stage.py vllm (it lands in /tmp/fk-site/vllm):
#   bash reports/gpu/vllm_gpu.sh STEP [STEP ...]
#   STEP: setup tests smoke aa passthrough triton wrong pack
# Each step leaves results.json + report.md + engine logs under /tmp/fk-work/<step>;
# `pack` bundles them into $OUT/evidence.tgz (long suites run in the background, see below).
set -u
export PYTHONPATH=/tmp/fk-site/vllm PYTHONUNBUFFERED=1
OUTDIR=${OUT:-/tmp/fk-out}; WORK=/tmp/fk-work; MODELS=/tmp/fk-models
mkdir -p "$OUTDIR" "$WORK"
FK="python3 -m fk_adapters.cli.main"
SC=llama31-8b-4l

REPO=$(pwd)
for step in "$@"; do
  cd "$REPO" || exit 1
  echo "=== $step $(date -u +%H:%M:%S)"
  case $step in
    setup)
      python3 -m pip install -q --no-deps --no-build-isolation --no-index --upgrade --target /tmp/fk-site/vllm \
        . plugins/fk-triton plugins/fk-passthrough plugins/fk-wrong 2>&1 | grep -v -i warning
      cd "$WORK" || exit 1
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
      $FK doctor --engine vllm | tee "$WORK/doctor.txt"
      $FK plugins ;;
    smoke)
      cd "$WORK"
      $FK run --plugins triton --scenario tiny-gemma --dtype bfloat16 --quick --out "$WORK/smoke" \
        --model-cache $MODELS --timeout 500 ;;
    aa)
      cd "$WORK"
      $FK run --aa --scenario $SC --out "$WORK/aa" --model-cache $MODELS --timeout 400 --baseline-from "$WORK/triton" ;;
    triton)
      cd "$WORK"
      $FK run --plugins triton --scenario $SC --out "$WORK/triton" --model-cache $MODELS --timeout 400 \
        --allow-unexercised ;;
    passthrough|wrong)  # against the baseline runs of the triton step (same job), to save GPU time
      cd "$WORK"
      $FK run --plugins "$step" --scenario $SC --out "$WORK/$step" --model-cache $MODELS --timeout 400 \
        --allow-unexercised --baseline-from "$WORK/triton" ;;
    tests)
      cd /tmp && python3 -m pytest "$REPO/tests" -m gpu -q -p no:cacheprovider 2>&1 | tee "$WORK/pytest-gpu.txt" | tail -3 ;;
    pack)  # everything so far into $WORK/evidence.tgz (a later call copies it to its $OUT)
      cd "$WORK" && tar czf evidence.tmp.tgz --exclude='*.safetensors' --exclude='*.tgz' * && mv evidence.tmp.tgz evidence.tgz \
        && ls -la evidence.tgz ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  echo "=== $step done $(date -u +%H:%M:%S) rc=$?"
done
