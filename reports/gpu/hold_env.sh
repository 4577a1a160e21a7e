# Sourced by the issue hold scripts: `. reports/gpu/hold_env.sh ISSUE ENGINE` sets the staged engine's environment
# (fk's site, the per-engine sites the runner starts drivers with) and W (this issue's work folder for ENGINE).
set -u
HOLD_ISSUE=$1; ENGINE=$2
export PYTHONPATH=/tmp/fk-site/$ENGINE PYTHONUNBUFFERED=1
export FK_VLLM_PYTHONPATH=/tmp/fk-site/vllm FK_SGLANG_PYTHONPATH=/tmp/fk-site/sglang
# NVLink multicast stays off on the lent multi-GPU hosts (it can take a shared host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# What else would reach for multicast at TP=2 (a read of both wheels, session 26): vLLM's torch symmetric-memory
# all-reduce (on by default; TORCH_SYMM_MEM_DISABLE_MULTICAST only makes it fall back after allocating), FlashInfer's
# fused all-reduce (fk turns the fusion off under TP), SGLang's multimem logits all-gather (off only through
# TORCH_SYMM_MEM_DISABLE_MULTICAST). Never pass SGLang enable_symm_mem / enable_nccl_nvls: they set NCCL_NVLS_ENABLE=1.
export VLLM_ALLREDUCE_USE_SYMM_MEM=0 VLLM_FLASHINFER_ALLREDUCE_BACKEND=trtllm
[ "$ENGINE" = sglang ] && export FK_WEIGHTS_PYTHONPATH=/tmp/fk-site/fk FK_TRANSFORMERS_PYTHONPATH=/tmp/fk-site/fk
REPO=$(pwd); ROOT=/tmp/fk-work; W=$ROOT/$HOLD_ISSUE/$ENGINE; MODELS=${FK_HOLD_MODELS:-/tmp/fk-models}  # a lane that deletes its weights: its own
mkdir -p "$W"
FK="python3 -m fk_adapters.cli.main"

# `wants "$STEPS_VAR" step`: is step among the space-separated steps a lane asked for?
wants() { case " $1 " in *" $2 "*) return 0 ;; esac; return 1; }

# `pack`: this issue's work folder for ENGINE (no weights, no raw traces) into $OUT, which the device tool brings back
hold_pack() {
  # job.json: each engine process's inputs, 3.8 MB apiece for fk46-qwen3-next (session 58's pack was refused for size)
  mkdir -p "${OUT:?}" && tar czf "$OUT/$HOLD_ISSUE-$ENGINE.tgz" --exclude='*.safetensors' --exclude='*.trace.json*' \
    --exclude='job.json' \
    -C "$ROOT/$HOLD_ISSUE" "$ENGINE" && ls -la "$OUT"
}
