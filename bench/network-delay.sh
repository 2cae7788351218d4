#!/usr/bin/env bash
# Issue #16 item 7: the file's per-hop network delay in the lab. bench/network-delay.yaml (two
# hops, 5 ms each way, light load) in `tailguard sim` and `tailguard lab run --quick` (loopback:
# the sidecars hold each hop, docs/lab.md); prints both p50s and their ratio per scenario.
# Target: the lab's p50 within ±10 % of the simulator's. Exits 1 when a run is out of bounds.
# Extra arguments go to `tailguard lab run` (e.g. `--isolation netns`).
set -euo pipefail
cd "$(dirname "$0")/.."
FILE=bench/network-delay.yaml
TG=target/release/tailguard
[ -x "$TG" ] || cargo build --release --locked
OUT=$(mktemp -d /tmp/tailguard-network-delay.XXXXXX)
"$TG" sim "$FILE" --quick --json "$OUT/sim.json" >/dev/null 2>"$OUT/sim.log"
"$TG" lab run "$FILE" --quick --out "$OUT/lab" "$@" >"$OUT/lab.log" 2>&1 || { cat "$OUT/lab.log"; exit 1; }
python3 - "$OUT/sim.json" "$OUT/lab/results.json" <<'PY'
import json, sys
sim = {(r["scenario"], r["variant"]): r for r in json.load(open(sys.argv[1]))["runs"]}
lab = json.load(open(sys.argv[2]))["runs"]
BOUND = 0.10
print(f"{'scenario':9} {'sim p50':>8} {'lab p50':>8} {'ratio':>6} {'sim p90':>8} {'lab p90':>8} {'lab ok':>7}  within ±{BOUND:.0%}")
bad = 0
for r in lab:
    s = sim[(r["scenario"], r["variant"])]
    ratio = r["latency_ms"]["p50"] / s["latency_ms"]["p50"]
    ok = abs(ratio - 1) <= BOUND
    bad += not ok
    print(f"{r['scenario']:9} {s['latency_ms']['p50']:8.2f} {r['latency_ms']['p50']:8.2f} {ratio:6.3f} "
          f"{s['latency_ms']['p90']:8.2f} {r['latency_ms']['p90']:8.2f} {100*r['success_rate']:6.2f}%  {'yes' if ok else 'NO'}")
print(f"lab results: {sys.argv[2]}")
sys.exit(1 if bad else 0)
PY
