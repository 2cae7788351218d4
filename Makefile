# tailguard: the two set-up commands are `make demo` and `make test`.
CARGO ?= cargo
BIN := target/release/tailguard
# The tuner (python/) lives in a virtual environment with pinned versions (python/constraints.txt).
PYTHON ?= python3
VENV := .venv
# The offline, strict Kubernetes manifest checker (tools/k8s-validate, Go: k8s.io/api types and
# kustomize), which the tests run on every manifest the project ships or writes; about 2 min to
# build from nothing on 2 cores, seconds once Go's cache holds it.
GO ?= go
K8S_VALIDATE := target/tools/k8s-validate

.PHONY: build pgo python demo deps test lint bench clean k8s-validate

build: python $(K8S_VALIDATE)
	$(CARGO) build --release --locked

k8s-validate: $(K8S_VALIDATE)

$(K8S_VALIDATE): tools/k8s-validate/go.mod tools/k8s-validate/go.sum tools/k8s-validate/main.go
	cd tools/k8s-validate && $(GO) build -mod=readonly -o ../../$(K8S_VALIDATE) .

# The profile-guided build of the same binary, for production and the proxy benchmarks:
# target/pgo/tailguard (7.5 min from nothing on 2 cores; see scripts/pgo-build.sh).
pgo:
	scripts/pgo-build.sh

python: $(VENV)/.installed

$(VENV)/.installed: python/pyproject.toml python/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -c python/constraints.txt -e 'python[test,postgres]'
	touch $@

# The default experiment (BLOC 40x10: least-request, bloc, round-robin) on real processes, < 3 min;
# `$(BIN) demo --sim` runs it in the simulator.
demo: build
	$(BIN) demo

# The Debian packages the tests use (nginx, redis-server, memcached, chromium, postgresql, ...),
# installed when missing; without root it names them and the command that installs them.
deps:
	scripts/install-test-deps.sh

# Tests run in release mode: the simulator's reproduction tests simulate minutes of traffic.
test: deps build
	$(CARGO) test --release --locked --workspace
	$(CARGO) test --release --locked -p tailguard-proxy --features kube --test kubernetes
	$(VENV)/bin/python -m pytest -q python/tests
	$(PYTHON) scripts/measured.py --check

# The tuner: ruff (lint and format) and mypy, configured in python/pyproject.toml.
lint: python
	$(CARGO) clippy --release --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --release --locked -p tailguard-proxy --features kube --all-targets -- -D warnings
	$(CARGO) fmt --all --check
	$(VENV)/bin/ruff check python scripts
	$(VENV)/bin/ruff format --check python scripts
	cd python && ../$(VENV)/bin/mypy

bench: build
	bench/sim-throughput.sh

clean:
	$(CARGO) clean
