#!/usr/bin/env bash
# Cancellation reaching the callee (issue #16 item 3), in the simulator: bench/cancellation.yaml's
# store at 70 % utilisation, unhedged, hedged (p90 percentile hedge) with the replicas stopping
# lost attempts (`cancellable: true`, the default) and hedged with them working on
# (`cancellable: false`). Prints the store's busy time (results' `work`) against the unhedged run's
# plus the work of the hedges that finished (`extra_s`).
# Target: with cancellation, busy <= 1.05 x (unhedged busy + finished hedges' work); without, the
# difference is reported. Env: SEED (1).
set -euo pipefail
cd "$(dirname "$0")/.."
TG=target/release/tailguard
[ -x "$TG" ] || cargo build --release --locked -p tailguard >/dev/null
OUT=$(mktemp /tmp/tailguard-cancellation.XXXXXX.json)
trap 'rm -f "$OUT" "$OUT.log"' EXIT
"$TG" sim bench/cancellation.yaml --seed "${SEED:-1}" --json "$OUT" >/dev/null 2>"$OUT.log" || { cat "$OUT.log"; exit 1; }
python3 - "$OUT" <<'PY'
import json, sys
runs = {r["variant"]: r for r in json.load(open(sys.argv[1]))["runs"]}
store = lambda r: next(w for w in r["work"] if w["service"] == "store")
base = store(runs["unhedged"])["busy_s"]
workers = 4 * 2
print(f"store utilisation unhedged: {base / (runs['unhedged']['duration_s'] * workers):.1%}")
print(f"{'variant':18} {'p99 ms':>8} {'extra load':>10} {'busy s':>9} {'finished hedges s':>18} {'unhedged + finished':>20} {'ratio':>6}")
for name in ["unhedged", "hedged", "hedged-no-cancel"]:
    r, w = runs[name], store(runs[name])
    expected = base + w["extra_s"]
    ratio = w["busy_s"] / expected
    print(f"{name:18} {r['latency_ms']['p99']:8.2f} {r['extra_load']:10.2%} {w['busy_s']:9.2f} {w['extra_s']:18.2f} {expected:20.2f} {ratio:6.3f}")
on, off = store(runs["hedged"])["busy_s"], store(runs["hedged-no-cancel"])["busy_s"]
met = on <= 1.05 * (base + store(runs["hedged"])["extra_s"])
print(f"with cancellation: busy {on:.2f} s = {on / (base + store(runs['hedged'])['extra_s']):.3f} x (unhedged + finished hedges): "
      + ("met (<= 1.05)" if met else "NOT met (> 1.05)"))
print(f"without: busy {off:.2f} s, {off - on:.2f} s ({off / on - 1:.1%}) more than with cancellation, "
      f"{off / base - 1:.1%} more than unhedged")
sys.exit(0 if met else 1)
PY
