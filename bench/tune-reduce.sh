#!/usr/bin/env bash
# The reduction's stability across trace seeds on examples/tune/few-app.yaml, where 3 of the 30
# parameters of few-space.yaml decide the p95 (its first three): for each seed, the simulator
# traces the defaults (2000 requests, as `tailguard-tune --reduce` does) and each method keeps its
# services; the table says which of the three parameters each method keeps (docs/tune.md, "Measured").
#
#   bench/tune-reduce.sh [SEEDS] [TUNE_SEEDS]   # default: 1 2 ... 10, and no tuning
#
# With TUNE_SEEDS, it then tunes few-app.yaml with tpe at budget 15 for each of those seeds (as both
# the algorithm's and the simulator's seed, so each reduction works on another trace seed) with
# no reduction, the paper's critical-path+variability and tail, and prints the re-measured
# improvements.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-$(seq -s ' ' 1 10)}
tune_seeds=${2:-}
work=$(mktemp -d /tmp/tune-reduce.XXXXXX)
trap 'rm -rf "$work"' EXIT
for seed in $seeds; do
  target/release/tailguard sim examples/tune/few-app.yaml --seed "$seed" --json "$work/r$seed.json" \
    --traces "$work/t$seed.json" --trace-sample 2000 >/dev/null 2>&1
done
.venv/bin/python - "$work" $seeds <<'PY'
import sys

from tailguard_tune import experiment, reduce, space

work, seeds = sys.argv[1], sys.argv[2:]
doc = experiment.load("examples/tune/few-app.yaml")
sp = space.load("examples/tune/few-space.yaml", doc)
key = sp.names()[:3]
methods = ("critical-path", "critical-path+variability", "variability", "tail")
kept_all = dict.fromkeys(methods, 0)
print("seed  " + "  ".join(f"{m:>27}" for m in methods))
for seed in seeds:
    traces = reduce.load_traces(f"{work}/t{seed}.json", ())
    cells = []
    for m in methods:
        sel = reduce.select_services(m, traces)
        names = set(reduce.reduce_space(sp, doc, sel.services).names())
        hit = sum(k in names for k in key)
        kept_all[m] += hit == 3
        cells.append(f"{hit}/3 of {len(names):2} params")
    tail = reduce.select_services("tail", traces)
    scores = ", ".join(f"{s} {v:.2f}" for s, v in list(tail.scores().items())[:4])
    print(f"{seed:>4}  " + "  ".join(f"{c:>27}" for c in cells) + f"   tail scores: {scores}")
print("all 3 kept, seeds: " + ", ".join(f"{m} {kept_all[m]}/{len(seeds)}" for m in methods))
PY

[ -z "$tune_seeds" ] && exit 0
tg=$PWD/target/release/tailguard
printf '%-26s %4s %7s %12s\n' reduce seed params improvement
for reduce in none critical-path+variability tail; do
  for seed in $tune_seeds; do
    dir="$work/tune-$reduce-$seed"
    .venv/bin/tailguard-tune examples/tune/few-app.yaml --space examples/tune/few-space.yaml --algo tpe --budget 15 \
      --seed "$seed" --sim-seed "$seed" --reduce "$reduce" --tailguard "$tg" --out "$dir" >"$dir.log" 2>&1 \
      || { echo "tuning failed: $(tail -1 "$dir.log")" >&2; exit 1; }
    .venv/bin/python - "$dir/summary.json" <<'PY'
import json
import sys

s = json.load(open(sys.argv[1]))
print(f"{s['reduce']:<26} {s['seed']:>4} {s['parameters_tuned']:>3}/30 {s['improvement_pct']:>11.1f} %")
PY
  done
done
