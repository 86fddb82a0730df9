# fleet: every target works from a fresh clone (see README.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo up down status test lint crds crds-check bins kueue-bins trainer-bins helm images mpi-packages node-packages browser-packages dashboard-screenshot kind-packages e2e-kind bench simulate chaos kubeflow-suite clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

bins:  ## build (or reuse) the control-plane binaries in the cache outside the repo
	bash e2e/toolchain/build.sh >/dev/null

# Built before the suite, not inside the bench lane's time limit (cold: several minutes of Go).
kueue-bins:  ## build (or reuse) Kueue's scalability runner and minimalkueue from the pinned module
	bash e2e/toolchain/build-kueue.sh >/dev/null

trainer-bins:  ## build (or reuse) Kubeflow Trainer's and JobSet's controllers for the member-trainer e2e
	bash e2e/toolchain/build-trainer.sh >/dev/null

helm:  ## build (or reuse) the pinned helm that lints, renders and installs deploy/helm
	bash e2e/toolchain/build-helm.sh >/dev/null

mpi-packages:  ## OpenMPI and sshd (Debian packages) for the real mpirun test
	bash scripts/debian-packages.sh

node-packages:  ## containerd, runc, CNI plugins, iptables, debootstrap (Debian) for real nodes
	bash scripts/node-packages.sh

browser-packages:  ## Chromium and chromedriver (Debian) for the dashboard's browser tests
	bash scripts/browser-packages.sh

kind-packages:  ## podman, runc, debootstrap (Debian) for the kind backend
	bash scripts/kind-packages.sh

# BACKEND=kind: every cluster a kind cluster on podman (kind and its node image built here,
# see e2e/localfleet/kindfleet.py); the hub and agents run as Pods there. Default: local.
BACKEND ?= local

# `make up` and `make demo` give every cluster a real node and run the hub Deployment and the
# agent DaemonSet on it as Pods (FLEET_NODES=real, the default; a machine that cannot says why
# and falls back to host processes). FLEET_NODES=host runs them as host processes.
FLEET_NODES ?= real
NODE_DEPS := $(if $(filter kind,$(BACKEND)),kind-packages,$(if $(filter real,$(FLEET_NODES)),node-packages))
FLEET_ENV := FLEET_NODES=$(FLEET_NODES) FLEET_BACKEND=$(BACKEND)

up: $(STAMP) bins $(NODE_DEPS)  ## hub + members on real control planes, hub and agents as Pods
	$(FLEET_ENV) $(PY) -m e2e.localfleet up

demo: $(STAMP) bins $(NODE_DEPS)  ## up, then the seed's PyTorchJob from submission to Succeeded
	$(FLEET_ENV) $(PY) -m e2e.localfleet demo

status: $(STAMP)
	$(FLEET_ENV) $(PY) -m e2e.localfleet status

down: $(STAMP)
	$(FLEET_ENV) $(PY) -m e2e.localfleet down

e2e-kind: $(STAMP) bins kind-packages  ## the multi-cluster e2e suite on kind clusters (README: how long)
	FLEET_E2E_BACKEND=kind $(PY) -m pytest e2e --timeout 1800 $(PYTEST_ARGS)

kubeflow-suite: $(STAMP)  ## the training operator's SDK e2e suite from CHECKOUT=<training-operator at v1.9.0> against `make up`'s hub
	@test -n "$(CHECKOUT)" || { echo "usage: make kubeflow-suite CHECKOUT=path/to/training-operator" >&2; exit 2; }
	$(PY) -m e2e.kubeflow_suite --checkout $(CHECKOUT) -- $(PYTEST_ARGS)

crds: $(STAMP)  ## regenerate crds/ from the API models
	$(PY) -m fleet.api.crds

crds-check: $(STAMP)
	$(PY) -m fleet.api.crds --check

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Built before the suite, not inside a test's time limit (cold: a few minutes of debootstrap
# and PyPI downloads); the suite's fleet reuses the cached archives.
images: $(STAMP) node-packages  ## the real nodes' images (pause, busybox, fleet), cached outside the repo
	$(PY) -m e2e.localfleet.images

test: $(STAMP) bins kueue-bins trainer-bins helm mpi-packages node-packages browser-packages images  ## lint, type checks, layering, unit, integration and e2e tests
	$(PY) -m pytest $(PYTEST_ARGS)

dashboard-screenshot: $(STAMP) bins node-packages browser-packages images  ## docs/dashboard/*.png: the dashboard's pages in headless Chromium, from its browser test on a local fleet
	FLEET_DASHBOARD_SHOTS=docs/dashboard $(PY) -m pytest e2e/test_dashboard.py -q

bench: $(STAMP) bins kueue-bins  ## the performance budgets of docs/architecture.md (JSON lines + table)
	$(PY) -m e2e.bench --out .bench/results.jsonl

chaos: $(STAMP) bins $(NODE_DEPS)  ## every fault scenario at full count on fresh fleets (Pod scenarios: real nodes); table of violations
	$(PY) -m e2e.chaos $(CHAOS_ARGS)

simulate: $(STAMP)  ## trace-driven comparison of fit modes, queue policies and borrowing
	$(PY) -m fleet.sim --out .sim $(SIMFLAGS)

clean: down
	rm -rf $(VENV) .fleet
