# fleet: every target works from a fresh clone (see README.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo up down status test lint crds crds-check bins mpi-packages bench simulate clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

bins:  ## build (or reuse) the control-plane binaries in the cache outside the repo
	bash e2e/toolchain/build.sh >/dev/null

mpi-packages:  ## OpenMPI and sshd (Debian packages) for the real mpirun test
	bash scripts/debian-packages.sh

up: $(STAMP) bins  ## hub + members on real control planes, hub controller and agents
	$(PY) -m e2e.localfleet up

demo: $(STAMP) bins  ## up, then the seed's PyTorchJob from submission to Succeeded
	$(PY) -m e2e.localfleet demo

status: $(STAMP)
	$(PY) -m e2e.localfleet status

down: $(STAMP)
	$(PY) -m e2e.localfleet down

crds: $(STAMP)  ## regenerate crds/ from the API models
	$(PY) -m fleet.api.crds

crds-check: $(STAMP)
	$(PY) -m fleet.api.crds --check

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: $(STAMP) bins mpi-packages  ## lint, type checks, layering, unit, integration and e2e tests
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(STAMP) bins  ## the performance budgets of DESIGN.md section 8 (JSON lines + table)
	$(PY) -m e2e.bench --out .bench/results.jsonl

simulate: $(STAMP)  ## trace-driven comparison of fit modes, queue policies and borrowing
	$(PY) -m fleet.sim --out .sim

clean: down
	rm -rf $(VENV) .fleet
