#!/usr/bin/env bash
# Simulated requests per second of one core on BLOC 40x10 (examples/bloc.yaml), against a peer
# measured in the same run: the same least-request model written in SimPy (bench/peers/simpy_bloc.py).
# Both simulate 300 s without warm-up. Prints medians of 5 samples and the ratio.
# Aim (issue #2): over 1,000,000 requests/s per core.
# Then the scale bench (issue #19): CPU time per simulated request at 50 and at 10,000 replicas,
# for every balancer, and the speed ratio (aim: >= 0.5), median of SCALE_RUNS (default 5) runs.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import simpy' 2>/dev/null || python3 -m pip install --quiet simpy
# With the release binary's settings (fat LTO, one codegen unit: what `tailguard sim` runs), which
# the bench profile inherits; said here explicitly, in a target directory of its own.
out=$(CARGO_TARGET_DIR=target/bench-release CARGO_PROFILE_BENCH_LTO=fat CARGO_PROFILE_BENCH_CODEGEN_UNITS=1 \
  cargo bench --locked -p tailguard-sim --bench throughput 2>/dev/null)
echo "$out"
ours=$(echo "$out" | awk '$1 == "least-request" { print $2 }')
peer=$(for _ in 1 2 3 4 5; do python3 bench/peers/simpy_bloc.py 300; done |
  python3 -c 'import json,statistics,sys; print(round(statistics.median(json.loads(l)["requests_per_s"] for l in sys.stdin)))')
echo
echo "peer: SimPy, the same 40x10 least-request model, median of 5 runs: $peer requests/s"
python3 -c "print(f'tailguard / SimPy: {$ours / $peer:.1f}x')"
echo
CARGO_TARGET_DIR=target/bench-release CARGO_PROFILE_BENCH_LTO=fat CARGO_PROFILE_BENCH_CODEGEN_UNITS=1 \
  cargo bench --locked -p tailguard-sim --bench scale 2>/dev/null
