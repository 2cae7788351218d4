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

# The protocol suites run against the proxy (tools/protocol-suites, Go, pinned): h2spec and
# grpc-go's interop server and client; about 3 min to build from nothing on 2 cores, seconds once
# Go's cache holds them. `make test` requires them (TAILGUARD_REQUIRE_SUITES: no test skips).
SUITES := target/tools/h2spec target/tools/grpc-interop-server target/tools/grpc-interop-client
SUITES_MOD := tools/protocol-suites/go.mod tools/protocol-suites/go.sum

.PHONY: build pgo python demo deps test lint bench clean k8s-validate suites

build: python $(K8S_VALIDATE)
	$(CARGO) build --release --locked

k8s-validate: $(K8S_VALIDATE)

suites: $(SUITES)

target/tools/h2spec: $(SUITES_MOD)
	cd tools/protocol-suites && $(GO) build -mod=readonly -o ../../$@ github.com/summerwind/h2spec/cmd/h2spec

target/tools/grpc-interop-%: $(SUITES_MOD)
	cd tools/protocol-suites && $(GO) build -mod=readonly -o ../../$@ google.golang.org/grpc/interop/$*

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
# installed when missing (without root it names them and the command that installs them), and
# the protocol suites.
deps: suites
	scripts/install-test-deps.sh

# Tests run in release mode: the simulator's reproduction tests simulate minutes of traffic.
test: deps build
	TAILGUARD_REQUIRE_SUITES=1 $(CARGO) test --release --locked --workspace
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
