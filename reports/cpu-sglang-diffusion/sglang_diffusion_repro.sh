# Environment for sglang_diffusion_repro*.py on this CPU machine (source it). See sglang-diffusion-review.md.
export PYTHONPATH=/tmp/sgstub:/tmp/sgsite:/tmp/sg0515:/work/main
export HF_HUB_OFFLINE=1
export JOBS_DIR=/tmp/sgrepro
PY=/work/main/.venv/bin/python
