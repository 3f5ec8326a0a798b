# Sluice developer entry points. See README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-unit test-node test-images lint demo platform-up platform-down deploy crds images bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# the whole suite on two workers, a test file per work unit: each worker starts its own platform
# (Kafka, control plane, node agent on a loopback range of its own), and the e2e files, sorted
# last, run after the worker's other files; the real node's tests (tests/platform) are one unit
test: install
	$(BIN)/python -m pytest -n 2 --dist loadfile tests/unit tests/integration tests/e2e tests/platform --durations=30

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

demo: install
	$(BIN)/python -m sluice_dev.demo

platform-up: install
	$(BIN)/sluice-dev platform up

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
