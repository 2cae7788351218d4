#!/usr/bin/env bash
# The simulator and the lab on the same experiment file: p50 and p99 of every run the lab can do
# (oracle variants are simulator-only), as lab / sim ratios, against the bounds the lab is held to
# (p50 within ±10 %, p99 within ±20 %). Extra arguments go to `tailguard lab run` (e.g.
# `--isolation netns`, `--scenario 40x10`; the simulator runs the whole file).
#
#   bench/lab-vs-sim.sh examples/speculative.yaml
#   bench/lab-vs-sim.sh examples/bloc.yaml --scenario 40x10
set -euo pipefail
cd "$(dirname "$0")/.."
FILE=${1:?usage: bench/lab-vs-sim.sh FILE [lab options...]}
shift
TG=target/release/tailguard
[ -x "$TG" ] || cargo build --release --locked
OUT=$(mktemp -d /tmp/tailguard-lab-vs-sim.XXXXXX)
"$TG" sim "$FILE" --quick --json "$OUT/sim.json" >/dev/null
"$TG" lab run "$FILE" --quick --out "$OUT/lab" "$@" >/dev/null
python3 - "$OUT/sim.json" "$OUT/lab/results.json" <<'PY'
import json, sys
sim = {(r["scenario"], r["variant"]): r for r in json.load(open(sys.argv[1]))["runs"]}
lab = json.load(open(sys.argv[2]))["runs"]
print(f"{'scenario':10} {'variant':15} {'sim p50':>9} {'lab p50':>9} {'ratio':>6} {'sim p99':>9} {'lab p99':>9} {'ratio':>6} {'sim ok':>7} {'lab ok':>7}  within")
bad = 0
for r in lab:
    s = sim[(r["scenario"], r["variant"])]
    ratio = lambda k: r["latency_ms"][k] / s["latency_ms"][k] if s["latency_ms"][k] else float("nan")
    p50, p99 = ratio("p50"), ratio("p99")
    ok = abs(p50 - 1) <= 0.10 and abs(p99 - 1) <= 0.20
    bad += not ok
    print(f"{r['scenario']:10} {r['variant']:15} {s['latency_ms']['p50']:9.1f} {r['latency_ms']['p50']:9.1f} {p50:6.3f} "
          f"{s['latency_ms']['p99']:9.1f} {r['latency_ms']['p99']:9.1f} {p99:6.3f} "
          f"{100*s['success_rate']:6.2f}% {100*r['success_rate']:6.2f}%  {'yes' if ok else 'NO'}")
print(f"lab results: {sys.argv[2]}")
sys.exit(1 if bad else 0)
PY
