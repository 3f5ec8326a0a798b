# Sluice developer entry points. See README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-unit test-node test-images lint lock plan-hashes demo platform-up platform-down deploy crds images bench clean

install: $(STAMP)

# the dependencies from their lock (exact versions, hash-checked; `make lock` regenerates it), then
# the project itself, editable, with the lock's build backend
$(STAMP): pyproject.toml requirements/dev.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/dev.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

# regenerate the dependency locks under requirements/ with the pinned uv (UPGRADE=1: newest allowed)
lock:
	$(PYTHON) devtools/sluice_dev/locks.py $(if $(UPGRADE),--upgrade)

# record the corpora's plan hashes in tests/corpus/plan_hashes.json: only for a deliberate change of
# compiled plans, whose reason the commit message gives (docs/plans.md)
plan-hashes: install
	$(BIN)/python -m sluice_dev.plan_hashes --write

# the whole suite on two workers, a test file per work unit: each worker starts its own platform
# (Kafka, control plane, node agent on a loopback range of its own); the e2e files and the real
# node's tests (tests/platform) are one work unit, which tests/conftest.py puts first
test: install
	$(BIN)/python -m pytest -n 2 --dist loadfile tests/unit tests/integration tests/e2e tests/platform --durations=50

test-unit: install
	$(BIN)/python -m pytest tests/unit

test-node: install
	$(BIN)/python -m pytest tests/platform --durations=10

# the images built from their Dockerfiles and run under runc and containerd (root; 4 minutes with
# current archives, 7 after a source change, 8 more on a machine that never built them): not in
# `make test` until the e2e suite runs on these images on the real node
test-images: install
	$(BIN)/python -m pytest tests/images --durations=10

lint: install
	$(BIN)/ruff check operator runtime-image devtools tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m sluice_dev.doclinks

demo: install
	$(BIN)/python -m sluice_dev.demo

# NODES=2: a second node, sluice-node-2 (docs/platform.md#two-nodes)
platform-up: install
	$(BIN)/sluice-dev platform up $(if $(NODES),--nodes $(NODES))

deploy: install
	$(BIN)/sluice-dev deploy

platform-down: install
	$(BIN)/sluice-dev platform down

images: install
	$(BIN)/sluice-dev images build

crds: install
	$(BIN)/sluice crds --output-dir crds --chart-dir charts/sluice/crds

clean:
	rm -rf $(VENV) .platform .pytest_cache .mypy_cache .ruff_cache
