# tailguard: the two set-up commands are `make demo` and `make test`.
CARGO ?= cargo
BIN := target/release/tailguard
# The tuner (python/) lives in a virtual environment with pinned versions (python/constraints.txt).
PYTHON ?= python3
VENV := .venv

.PHONY: build pgo python demo deps test lint bench clean

build: python
	$(CARGO) build --release --locked

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
	$(VENV)/bin/python -m pytest -q python/tests
	$(PYTHON) scripts/measured.py --check

# The tuner: ruff (lint and format) and mypy, configured in python/pyproject.toml.
lint: python
	$(CARGO) clippy --release --locked --workspace --all-targets -- -D warnings
	$(CARGO) fmt --all --check
	$(VENV)/bin/ruff check python scripts
	$(VENV)/bin/ruff format --check python scripts
	cd python && ../$(VENV)/bin/mypy

bench: build
	bench/sim-throughput.sh

clean:
	$(CARGO) clean
