#!/usr/bin/env bash
# The tuner on the held-out example (examples/tune/shop-app.yaml, 18 services, 36 parameters):
# tunes it with each algorithm and seed, then re-measures every study's best.yaml, the defaults and
# the hand-found floor (bench/tune-heldout-floor.yaml) on 5 seeds no study used, and prints the
# table of docs/tune.md ("Measured": success never below --min-success, distance to the floor,
# improvement kept on unseen seeds).
#
#   bench/tune-heldout.sh [ALGOS] [SEEDS] [BUDGET]
#   bench/tune-heldout.sh "tpe hybrid" "$(seq -s ' ' 0 9)" 15
# Environment: OUT (default tune-out/heldout), TUNE_ARGS (more tuner options), TAILGUARD (the
# binary, default target/release/tailguard).
set -euo pipefail
cd "$(dirname "$0")/.."
algos=${1:-tpe hybrid}
seeds=${2:-0 1 2 3 4 5 6 7 8 9}
budget=${3:-15}
out=${OUT:-tune-out/heldout}
extra=${TUNE_ARGS:-}
export TAILGUARD=${TAILGUARD:-$PWD/target/release/tailguard}   # the binary every run uses
mkdir -p "$out"
for algo in $algos; do
  for seed in $seeds; do
    dir="$out/$algo-$seed"
    rm -rf "$dir"
    start=$(date +%s)
    code=0
    .venv/bin/tailguard-tune examples/tune/shop-app.yaml --space examples/tune/shop-space.yaml --algo "$algo" \
      --tailguard "$TAILGUARD" --budget "$budget" --seed "$seed" --out "$dir" $extra >"$dir.log" 2>&1 || code=$?
    # Exit 3: no configuration reached --min-success (reported, not an error of the bench).
    if [ "$code" != 0 ] && [ "$code" != 3 ]; then echo "$algo seed $seed failed (exit $code): see $dir.log" >&2; exit 1; fi
    echo "$algo seed $seed: $(( $(date +%s) - start )) s, exit $code" >&2
  done
done
.venv/bin/python bench/tune_heldout.py "$out" examples/tune/shop-app.yaml bench/tune-heldout-floor.yaml
