# tailguard: the two set-up commands are `make demo` and `make test`.
CARGO ?= cargo
# `make build` ships target/release/tailguard (the release profile: fat LTO, one codegen unit).
BIN := target/release/tailguard
# `make test` and `make demo` build and run the same code with Cargo.toml's test-release profile
# (no whole-program LTO, 16 codegen units): minutes quicker to build, the proxy about 8 % more CPU
# per request. `make demo` after `make test` builds nothing.
TEST_PROFILE := test-release
TEST_BIN := target/$(TEST_PROFILE)/tailguard
# ... with the `kube` feature, as the image is built (Dockerfile); `make build` leaves it out.
TEST_FEATURES := --features tailguard/kube
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

.PHONY: build pgo python demo deps peers test test-tools test-build lint bench clean k8s-validate suites test-bin

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

# tailguard's recommended policies against nginx and HAProxy as sidecars on real processes
# (examples/peers.yaml's store and failing replicas, about 3 min); `tailguard demo --sim` runs the
# same in the simulator.
demo: peers test-bin
	$(TEST_BIN) demo

# The binary `make test` left is reused while no source changed since (Cargo would rebuild it for
# `-p tailguard` alone, whose dependencies' features differ from the workspace's test build);
# without one, the demo builds the binary alone, without the `kube` feature it does not use.
test-bin: $(TEST_BIN)

$(TEST_BIN): $(shell git ls-files 'crates/*' Cargo.toml Cargo.lock 2>/dev/null)
	$(CARGO) build --profile $(TEST_PROFILE) --locked -p tailguard

# nginx and HAProxy for the demo, installed when missing; where they cannot be, the demo says so
# and runs without them.
peers:
	scripts/install-test-deps.sh --peers

# The Debian packages the tests use (nginx, redis-server, memcached, chromium, postgresql, ...),
# installed when missing (without root it names them and the command that installs them), and
# the protocol suites.
deps: suites
	scripts/install-test-deps.sh

# Tests run optimised (the simulator's reproduction tests simulate minutes of traffic), with the
# test-release profile and the image's `kube` feature (one build: a second one without it cost 3
# more minutes); the tuner's tests (one process per core: 55-60 s on 2 cores against 98 s in one)
# and scripts/measured.py run that build's binary too. The Rust build runs in one of two job slots,
# the Debian packages, the Go tools and the tuner's environment one after another in the other
# (they wait on downloads more than on CPU).
CARGO_TEST := $(CARGO) test --profile $(TEST_PROFILE) --locked --workspace $(TEST_FEATURES)
test:
	$(MAKE) --no-print-directory -j2 test-build test-tools
	TAILGUARD_REQUIRE_SUITES=1 $(CARGO_TEST)
	PATH="$(CURDIR)/target/$(TEST_PROFILE):$$PATH" $(VENV)/bin/python -m pytest -q -n auto python/tests
	$(PYTHON) scripts/measured.py --check --bin $(TEST_BIN)

# What the tests run besides the Rust build: the Debian packages first (the tuner's environment
# needs python3-venv).
test-tools: deps
	$(MAKE) --no-print-directory python $(K8S_VALIDATE)

# Cargo is kept off make's jobserver, which would hold it to make's two job slots shared with the
# other recipe; it takes its own, one per core.
test-build:
	env -u MAKEFLAGS -u MFLAGS $(CARGO_TEST) --no-run

# The tuner: ruff (lint and format) and mypy, configured in python/pyproject.toml.
lint: python
	$(CARGO) clippy --profile $(TEST_PROFILE) --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --profile $(TEST_PROFILE) --locked -p tailguard-proxy --features kube --all-targets -- -D warnings
	$(CARGO) fmt --all --check
	$(VENV)/bin/ruff check python scripts
	$(VENV)/bin/ruff format --check python scripts
	cd python && ../$(VENV)/bin/mypy

bench: build
	bench/sim-throughput.sh

clean:
	$(CARGO) clean
