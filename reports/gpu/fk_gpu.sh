#!/bin/bash
# GPU evidence for one engine's adapter. Run on the lent GPU machine from the repository root,
# after staging the engine with ../shared/device/stage.py ENGINE (it lands in /tmp/fk-site/ENGINE), and for SGLang
# the wheel its lock leaves out with reports/gpu/stage_extra.sh sglang (`setup` installs it):
#   bash reports/gpu/fk_gpu.sh ENGINE STEP [STEP ...]
#   ENGINE: vllm | sglang | transformers (steps setup, tfx, pack)
#   STEP: setup tests smoke triton passthrough aa wrong both capture check fk46 fk46ab tfx tfxab deltas jitpack pack
# Each step leaves results.json + report.md + engine logs under /tmp/fk-work/<ENGINE>/<step>;
# `both` runs vLLM and SGLang in one `fk run` (needs both staged); `pack` bundles everything
# into /tmp/fk-work/evidence.tgz, which a later call copies to its $OUT. passthrough, wrong and aa
# reuse the baseline runs of $BASE (default: the triton step's; BASE=/tmp/fk-work/both/ENGINE after `both`).
# `check` reads the captures of $WORKLOADS/<scenario>/ENGINE.json (default: what `capture` wrote, /tmp/fk-work/workloads).
# A fresh machine spends minutes compiling JIT kernels (the engine's FlashInfer modules, the plugins' Triton kernels):
# `jitpack` splits those caches into /tmp/fk-work/jit/jit.tgz.partNN (under 16 MB each, to come back from $OUT), and
# `setup` unpacks such parts from $JIT_PARTS (default /tmp/fkstage/jit) when a later machine was given them.
set -u
ENGINE=$1; shift
export PYTHONPATH=/tmp/fk-site/$ENGINE PYTHONUNBUFFERED=1
export FK_VLLM_PYTHONPATH=/tmp/fk-site/vllm FK_SGLANG_PYTHONPATH=/tmp/fk-site/sglang
# SGLang 0.5.15 pins transformers 5.12.1 (no Kimi-Linear): fk writes checkpoints, and runs the transformers float32
# reference, with the machine's own transformers through fk's engine-free site (made by `setup`)
FKSITE=/tmp/fk-site/fk
[ "$ENGINE" = sglang ] && export FK_WEIGHTS_PYTHONPATH=$FKSITE FK_TRANSFORMERS_PYTHONPATH=$FKSITE
ROOT=/tmp/fk-work; WORK=$ROOT/$ENGINE; MODELS=/tmp/fk-models; WORKLOADS=${WORKLOADS:-$ROOT/workloads}
mkdir -p "$WORK"
FK="python3 -m fk_adapters.cli.main"
RUN="$FK run --engine $ENGINE --model-cache $MODELS --timeout 600"
SC=llama31-8b-4l
BASE=${BASE:-$WORK/triton}

REPO=$(pwd)
for step in "$@"; do
  cd "$WORK" || exit 1
  echo "=== $ENGINE $step $(date -u +%H:%M:%S)"
  case $step in
    setup)
      JIT=${JIT_PARTS:-/tmp/fkstage/jit}
      if ls "$JIT"/jit.tgz.part* >/dev/null 2>&1; then
        cat "$JIT"/jit.tgz.part* | tar xzf - -C / && echo "JIT and compile caches restored from $JIT" && du -sh \
          "$HOME"/.triton "$HOME"/.cache/flashinfer "$MODELS"/*-cache 2>/dev/null
      fi
      WHEELS=()
      for part0 in /tmp/fkstage/extra-"$ENGINE"*/*.whl.part00; do  # wheels the staged lock lacks (stage_extra.sh; every list of ENGINE*)
        [ -e "$part0" ] || continue
        whl=${part0%.part00}; cat "$whl".part* > "$whl"; WHEELS+=("$whl")
      done
      # one pip call: pip --target skips a top-level folder that already exists there, so wheels sharing a package
      # (fla-core and flash-linear-attention both ship fla/) installed one at a time lose the second one's modules
      if [ ${#WHEELS[@]} -gt 0 ]; then
        if log=$(python3 -m pip install -q --no-deps --no-index --no-compile --target "/tmp/fk-site/$ENGINE" "${WHEELS[@]}" 2>&1)
        then echo "installed ${#WHEELS[@]} extra wheels: $(for w in "${WHEELS[@]}"; do basename "$w"; done | tr '\n' ' ')"
        else echo "$log" | tail -5; fi
      fi
      SITES="/tmp/fk-site/$ENGINE"; [ "$ENGINE" = sglang ] && SITES="$SITES $FKSITE"
      for site in $SITES; do
        (cd "$REPO" && python3 -m pip install -q --no-deps --no-build-isolation --no-index --upgrade \
          --target "$site" . plugins/fk-triton plugins/fk-passthrough plugins/fk-wrong plugins/fk-slow plugins/fk-vllm-moe 2>&1 \
          | grep -v -i warning)
      done
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
      { nvidia-smi topo -m; lscpu; } > "$ROOT/host-topology.txt" 2>&1  # which CPUs and NUMA node each GPU sits on
      grep -E "^NUMA node|^CPU\(s\)|^Socket" "$ROOT/host-topology.txt"
      $FK doctor --engine "$ENGINE" | tee "$WORK/doctor.txt"
      $FK plugins ;;
    tests)
      cd /tmp && python3 -m pytest "$REPO/tests" -m gpu -q -p no:cacheprovider 2>&1 | tee "$WORK/pytest-gpu.txt" | tail -5 ;;
    smoke)
      $RUN --plugins triton --scenario tiny-llama --dtype bfloat16 --quick --out "$WORK/smoke" --allow-uncovered ;;
    triton)
      $RUN --plugins triton --scenario $SC --out "$WORK/triton" --allow-uncovered ;;
    passthrough|wrong)  # against the same baseline runs (same job), to save GPU time
      $RUN --plugins "$step" --scenario $SC --out "$WORK/$step" --allow-uncovered --baseline-from "$BASE" ;;
    aa)
      $RUN --aa --scenario $SC --out "$WORK/aa" --baseline-from "$BASE" ;;
    both)  # one plugin, both engines, one side-by-side report
      $FK run --engine vllm --engine sglang --plugins triton --scenario $SC --model-cache $MODELS --timeout 600 \
        --allow-uncovered --out "$ROOT/both" ;;
    capture)  # the shapes this engine sends to each slot while serving the scenario (eager)
      $FK capture --engine "$ENGINE" --scenario $SC --model-cache $MODELS --timeout 600 --out "$ROOT/workloads" ;;
    check)  # each plugin kernel vs. this engine's own kernel on the captured shapes (most called first)
      $FK check --engine "$ENGINE" --plugins triton,passthrough --workload "$WORKLOADS/$SC/$ENGINE.json" \
        --max-shapes ${MAX_SHAPES:-40} --timeout 600 --out "$WORK/check" ;;
    fk46)  # the FastKernels architectures this engine hosts ($FK46: scenario names; default: its fk46-llm suite):
           # slots exercised (eager capture, $FK46_SIZE workloads, default --smoke) and device time per op family
           # (--profile); one scenario at a time, its seeded weights deleted after it (the disk holds ~2 models)
      NAMES=${FK46:-$($FK scenarios --engine "$ENGINE" --json | python3 -c \
        'import json,sys; print(" ".join(r["scenario"] for r in json.load(sys.stdin) if r["family"] == "llm"))')}
      for s in $NAMES; do
        $FK capture --engine "$ENGINE" --scenario "$s" --profile ${FK46_SIZE:---smoke} --model-cache $MODELS \
          --timeout ${FK46_TIMEOUT:-900} --out "$ROOT/fk46/$ENGINE"
        rm -rf "${MODELS:?}"/*
      done
      $FK coverage --results "$ROOT/fk46" --out "$ROOT/fk46" ;;
    tfx)  # the transformers host: every fk46 architecture it hosts, one at a time (capture with --profile, $FK46_SIZE
          # workloads), then the Triton plugin A/B where its slots apply ($TFX_AB), fk-wrong and passthrough on the first
      NAMES=${FK46:-$($FK scenarios --engine transformers --json | python3 -c \
        'import json,sys; print(" ".join(r["scenario"] for r in json.load(sys.stdin)))')}
      for s in $NAMES; do
        $FK capture --engine transformers --scenario "$s" --profile ${FK46_SIZE:---smoke} --model-cache $MODELS \
          --timeout ${FK46_TIMEOUT:-900} --out "$ROOT/fk46/transformers"
        rm -rf "${MODELS:?}"/*
      done
      $FK coverage --results "$ROOT/fk46" --out "$ROOT/fk46"
      AB=${TFX_AB:-fk46-bitnet-b1.58 fk46-dinov3}
      for s in $AB; do
        TR="$FK run --engine transformers --scenario $s --quick --model-cache $MODELS --timeout 900"
        $TR --plugins triton --out "$ROOT/tfx-ab/$s/triton"
        $TR --plugins wrong --out "$ROOT/tfx-ab/$s/wrong" --baseline-from "$ROOT/tfx-ab/$s/triton" --allow-uncovered
        $TR --plugins passthrough --out "$ROOT/tfx-ab/$s/passthrough" --baseline-from "$ROOT/tfx-ab/$s/triton"
        rm -rf "${MODELS:?}"/*
      done ;;
    tfxab)  # only the A/B of the tfx step, at full size ($AB_SIZE to shrink): triton, then wrong and passthrough
            # against triton's baseline runs, for each of $TFX_AB
      for s in ${TFX_AB:-fk46-bitnet-b1.58 fk46-dinov3}; do
        TR="$FK run --engine transformers --scenario $s ${AB_SIZE:-} --model-cache $MODELS --timeout 900"
        D=$ROOT/tfx-ab-full/$s
        $TR --plugins triton --out "$D/triton"
        $TR --plugins wrong --out "$D/wrong" --baseline-from "$D/triton" --allow-uncovered
        $TR --plugins passthrough --out "$D/passthrough" --baseline-from "$D/triton"
        rm -rf "${MODELS:?}"/*
      done ;;
    deltas)  # trustworthy deltas (reports/deltas.sh) on $DELTA_SC (default llama31-8b-decode: memory-bound, below the
             # power cap; llama31-8b-4l-prefill is the power-capped one of session 6): interleaved
             # A/A, a second A/A, fk-slow at each $SLOW_US; $DELTA_SIZE (default: the scenario's full size)
      mkdir -p "$ROOT/deltas"  # the GPU's clocks, power and throttle reasons every 250 ms beside the runs
      nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active \
        --format=csv -lms 250 > "$ROOT/deltas/gpu-clocks.csv" 2>&1 & SMI=$!
      OUT=$ROOT/deltas SC=${DELTA_SC:-llama31-8b-decode} ENGINE=$ENGINE FK="$FK" EXTRA="--model-cache $MODELS" \
        SIZE=${DELTA_SIZE-} bash "$REPO/reports/deltas.sh"
      kill $SMI ;;
    fk46ab)  # the Triton plugin against the stock engine on each of $FK46_AB (fk46 LLMs this engine hosts):
             # correctness diff, throughput ratio, kernel hits; $AB_MODE (default eager), $FK46_SIZE (default --smoke)
      for s in ${FK46_AB:?FK46_AB: the scenarios to run}; do
        $FK run --engine "$ENGINE" --plugins triton --scenario "$s" --mode ${AB_MODE:-eager} ${FK46_SIZE:---smoke} \
          --model-cache $MODELS --timeout ${FK46_TIMEOUT:-900} --allow-uncovered --allow-unexercised \
          --out "$ROOT/fk46-ab/$ENGINE/$s"
        rm -rf "${MODELS:?}"/*
      done ;;
    jitpack)
      mkdir -p "$ROOT/jit" && rm -f "$ROOT"/jit/jit.tgz.part*
      # Triton's, FlashInfer's, DeepGEMM's and SGLang's tvm-ffi JIT builds, where this machine made them; fk's
      # reference store (the float32 references, one per job, engine build and GPU: no weights) and vLLM's model-info
      # cache; the engines' compile caches fk keeps beside the weights (<model cache>/<engine>-cache/<side>, keyed by
      # the plugins' code). Session 52's cold first vLLM process was silent 112 s after graph capture (FlashInfer's
      # sampling module was JIT-built on it) and spent 31 s in torch.compile (a warm one 7 s). Paths from /, so `setup` restores each where it was
      H=${HOME#/}; M=${MODELS#/}
      DIRS=$(cd / && ls -d "$H"/.triton "$H"/.cache/flashinfer "$H"/.cache/deep_gemm "$H"/.cache/tvm-ffi \
        "$H"/.cache/fk-adapters/references "$H"/.cache/fk-adapters/vllm-modelinfos "$M"/*-cache 2>/dev/null)
      tar czf - -C / $DIRS | split -b 15m -d - "$ROOT/jit/jit.tgz.part"
      ls -la "$ROOT/jit" ;;
    pack)
      cd "$ROOT" && tar czf evidence.tmp.tgz --exclude='*.safetensors' --exclude='*.tgz' --exclude='*.trace.json*' --exclude=jit * \
        && mv evidence.tmp.tgz evidence.tgz && ls -la evidence.tgz ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  echo "=== $ENGINE $step done $(date -u +%H:%M:%S) rc=$?"
done
