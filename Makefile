# kvclaims: the two commands of the README are `make demo` and `make test`.
# Both create .venv and install what they need first; nothing else is assumed.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.kvclaims-installed

.PHONY: setup test demo lint reports schemas clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

setup: $(STAMP)

test: setup
	$(PY) -m pytest

demo: setup
	$(VENV)/bin/kvclaims demo --out kvclaims-out

lint: setup
	$(VENV)/bin/ruff check kvclaims tests bench
	$(VENV)/bin/ruff format --check kvclaims tests bench

# Regenerate every committed generated file (CI fails when they drift).
reports: setup
	$(VENV)/bin/kvclaims schema --out schemas
	$(VENV)/bin/kvclaims matrix descriptors -o reports

clean:
	rm -rf $(VENV) kvclaims-out .pytest_cache .hypothesis
