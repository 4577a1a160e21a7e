# Sourced by the issue hold scripts: `. reports/gpu/hold_env.sh ISSUE ENGINE` sets the staged engine's environment
# (fk's site, the per-engine sites the runner starts drivers with) and W (this issue's work folder for ENGINE).
set -u
HOLD_ISSUE=$1; ENGINE=$2
export PYTHONPATH=/tmp/fk-site/$ENGINE PYTHONUNBUFFERED=1
export FK_VLLM_PYTHONPATH=/tmp/fk-site/vllm FK_SGLANG_PYTHONPATH=/tmp/fk-site/sglang
# NVLink multicast stays off on the lent multi-GPU hosts (it can take a shared host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# vLLM's FlashInfer fused all-reduce defaults to mnnvl (multicast) on one node; fk turns that fusion off under TP
export VLLM_FLASHINFER_ALLREDUCE_BACKEND=trtllm
[ "$ENGINE" = sglang ] && export FK_WEIGHTS_PYTHONPATH=/tmp/fk-site/fk FK_TRANSFORMERS_PYTHONPATH=/tmp/fk-site/fk
REPO=$(pwd); ROOT=/tmp/fk-work; W=$ROOT/$HOLD_ISSUE/$ENGINE; MODELS=/tmp/fk-models
mkdir -p "$W"
FK="python3 -m fk_adapters.cli.main"

# `pack`: this issue's work folder for ENGINE (no weights, no raw traces) into $OUT, which the device tool brings back
hold_pack() {
  mkdir -p "${OUT:?}" && tar czf "$OUT/$HOLD_ISSUE-$ENGINE.tgz" --exclude='*.safetensors' --exclude='*.trace.json*' \
    -C "$ROOT/$HOLD_ISSUE" "$ENGINE" && ls -la "$OUT"
}
