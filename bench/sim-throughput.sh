#!/usr/bin/env bash
# Simulated requests per second of one core on BLOC 40x10 (examples/bloc.yaml).
# Prints, per variant, the median over several samples of requests/s, events/s and how many times
# faster than real time the simulation ran. Aim (issue #2): over 1,000,000 requests/s per core.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --locked -p tailguard-sim --bench throughput 2>/dev/null
