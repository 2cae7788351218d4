#!/usr/bin/env bash
# Tunes examples/tune/sim-app.yaml with each algorithm (and optionally a reduction) and prints the
# improvement table of docs/tune.md.
#
#   examples/tune/compare.sh [BUDGET] [SEEDS] [REDUCE] [ALGOS]
#   examples/tune/compare.sh 15 "0 1 2" none "hybrid tpe"
# Environment: OUT (output directory, default tune-out/compare), TUNE (the tuner),
# TUNE_ARGS (more options, e.g. "--tailguard PATH").
set -euo pipefail
cd "$(dirname "$0")/../.."
budget=${1:-15}
seeds=${2:-0}
reduce=${3:-none}
algos=${4:-random sa dds pso ga bo-gp bo-gbrt bo-rf tpe hybrid}
tune=${TUNE:-.venv/bin/tailguard-tune}
extra=${TUNE_ARGS:-}
out=${OUT:-tune-out/compare}
mkdir -p "$out"
printf '%-8s %-26s %4s %6s %10s %8s %12s %s\n' algo reduce seed params "defaults" best improvement seconds
for algo in $algos; do
  for seed in $seeds; do
    dir="$out/$algo-$reduce-$seed"
    rm -rf "$dir"
    start=$(date +%s)
    "$tune" examples/tune/sim-app.yaml --space examples/tune/sim-space.yaml --algo "$algo" --budget "$budget" \
      --seed "$seed" --reduce "$reduce" --out "$dir" $extra >"$dir.log" 2>&1 || {
      # Exit 3: no configuration reached --min-success (the study ran; it has no best to show).
      if [ $? = 3 ]; then echo "$algo seed $seed: no feasible configuration"; else echo "$algo seed $seed failed: see $dir.log"; fi
      continue
    }
    secs=$(( $(date +%s) - start ))
    python3 - "$dir/summary.json" "$secs" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{s['algo']:<8} {s['reduce']:<26} {s['seed']:>4} {s['parameters_tuned']:>3}/{s['parameters_in_space']:<2} "
      f"{s['defaults']:>8.2f}ms {s['best']:>6.2f}ms {s['improvement_pct']:>11.1f}% {float(sys.argv[2]):>7.1f}")
PY
  done
done
