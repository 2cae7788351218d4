# tailguard: the two set-up commands are `make demo` and `make test`.
CARGO ?= cargo
BIN := target/release/tailguard

.PHONY: build demo test lint bench clean

build:
	$(CARGO) build --release --locked

# The default experiment (BLOC 40x10: least-request, bloc, round-robin) on real processes, < 3 min;
# `$(BIN) demo --sim` runs it in the simulator.
demo: build
	$(BIN) demo

# Tests run in release mode: the simulator's reproduction tests simulate minutes of traffic.
test:
	$(CARGO) test --release --locked --workspace

lint:
	$(CARGO) clippy --release --locked --workspace --all-targets -- -D warnings
	$(CARGO) fmt --all --check

bench: build
	bench/sim-throughput.sh

clean:
	$(CARGO) clean
