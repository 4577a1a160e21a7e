#!/bin/bash
# after EAGLE-3's capture: stop the chain (Mamba2 cannot finish in this hold) and capture Gemma-4 with the new scenario file
while [ ! -e /tmp/fk-work/fk46/vllm/fk46-eagle-3/vllm.json ] && [ ! -e /tmp/fk-work/fk46/vllm/fk46-eagle-3/vllm.failed.json ]; do sleep 3; done
pkill -f "fk_gpu[.]sh vllm"; sleep 1; pkill -f "cli[.]main capture"; sleep 5; pkill -f "engines[.]vllm[.]driver"; sleep 5; rm -rf /tmp/fk-models/*
export PYTHONPATH=/tmp/fk-site/vllm PYTHONUNBUFFERED=1 FK_VLLM_PYTHONPATH=/tmp/fk-site/vllm
cd /tmp/fk-work && python3 -m fk_adapters.cli.main capture --engine vllm --scenario /tmp/fk-work/gemma4.toml --profile --smoke \
  --model-cache /tmp/fk-models --timeout 900 --out /tmp/fk-work/fk46/vllm
