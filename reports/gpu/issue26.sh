#!/bin/bash
# Issue 26 on the lent GPU (after ../shared/device/stage.py vllm and its install): the passthrough plugin, an A/A and
# the Triton plugin against stock vLLM 0.26.0 on llama31-8b-4l, compiled mode, 3 interleaved rounds each (--quick),
# so every interval includes the variation between engine processes; STEPS="rope-triton rope-wrong": GLM-4-9B's
# GPT-J-style rotary (glm4-9b-4l, eager, one pair). Run from the repository root:
#   bash reports/gpu/issue26.sh setup          # install fk and its plugins into /tmp/fk-site/vllm (the code as sent)
#   setsid nohup bash reports/gpu/issue26.sh runs > /tmp/fk-work/i26/run.log 2>&1 & # the runs (setsid: a job left
#     in the call's process group dies when the call returns), one after another -> /tmp/fk-work/i26/<step>
#   bash reports/gpu/issue26.sh pack           # /tmp/fk-work/i26 (no weights) -> $OUT/i26.tgz
set -u
export PYTHONPATH=/tmp/fk-site/vllm PYTHONUNBUFFERED=1
W=/tmp/fk-work/i26; mkdir -p "$W"
FK="python3 -m fk_adapters.cli.main"
RUN="$FK run --engine vllm --scenario llama31-8b-4l --mode compiled --quick --interleave ${ROUNDS:-3} \
     --model-cache /tmp/fk-models --timeout 900"
case $1 in
  setup)
    python3 -m pip install -q --no-deps --no-build-isolation --no-index --upgrade --target /tmp/fk-site/vllm \
      . plugins/fk-triton plugins/fk-passthrough plugins/fk-wrong plugins/fk-slow 2>&1 | grep -v -i warning
    git rev-parse HEAD 2>/dev/null > "$W/commit.txt"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$W/gpu.txt"
    cd "$W" && $FK doctor --engine vllm > "$W/doctor.txt"; tail -3 "$W/doctor.txt"; $FK plugins | head -20 ;;
  runs)  # from $W, so the installed fk (not the sent tree) runs
    cd "$W" || exit 1
    for step in ${STEPS:-passthrough aa triton}; do
      echo "=== $step $(date -u +%H:%M:%S)"
      case $step in
        aa) $RUN --aa --out "$W/$step" ;;
        rope-triton|rope-wrong)  # GPT-J-style rotary at GPU size, eager, one pair: the Triton plugin, then
                                 # fk-wrong's wrong-rope (every call as neox) against the same baseline
          R="$FK run --engine vllm --scenario glm4-9b-4l --mode eager --quick --interleave 0 --model-cache /tmp/fk-models \
             --timeout 900 --allow-uncovered"
          if [ "$step" = rope-triton ]; then $R --plugins triton --out "$W/$step"
          else $R --plugins wrong-rope --baseline-from "$W/rope-triton" --out "$W/$step"; fi ;;
        *) $RUN --plugins "$step" --allow-uncovered --out "$W/$step" ;;
      esac
      echo "=== $step done rc=$? $(date -u +%H:%M:%S)"
    done
    echo "=== all done" ;;
  pack)
    mkdir -p "${OUT:?}" && tar czf "$OUT/i26.tgz" --exclude='*.safetensors' --exclude='*.trace.json*' -C /tmp/fk-work i26 \
      && ls -la "$OUT/i26.tgz" ;;
esac
