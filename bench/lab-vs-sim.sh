#!/usr/bin/env bash
# The simulator and the lab on the same experiment file: p50 and p99 of every run the lab can do
# (oracle variants are simulator-only), as lab / sim ratios, and the success rates, against the
# bounds the lab is held to (p50 within ±10 %, p99 within ±20 %, success within 1 percentage point:
# a lab run that is as fast as the simulator's but fails more requests is no match). Extra arguments
# go to `tailguard lab run` (e.g. `--isolation netns`, `--scenario 40x10`; the simulator runs the
# whole file). Exits 1 when any run is out of bounds, and says which bound. A variant whose sidecar
# is HAProxy's or nginx's (docs/lab.md, "Peer sidecars") is compared like any other, its name
# followed by the peer's: the simulator runs its policies as tailguard's.
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
print(f"{'scenario':10} {'variant':15} {'sim p50':>9} {'lab p50':>9} {'ratio':>6} {'sim p99':>9} {'lab p99':>9} {'ratio':>6} "
      f"{'sim ok':>7} {'lab ok':>7} {'diff':>6}  within")
P50, P99, SUCCESS_PP = 0.10, 0.20, 1.0
bad = 0
for r in lab:
    s = sim[(r["scenario"], r["variant"])]
    ratio = lambda k: r["latency_ms"][k] / s["latency_ms"][k] if s["latency_ms"][k] else float("nan")
    p50, p99 = ratio("p50"), ratio("p99")
    diff_pp = 100 * (r["success_rate"] - s["success_rate"])
    out = [name for name, ok in (("p50", abs(p50 - 1) <= P50), ("p99", abs(p99 - 1) <= P99),
                                 ("success", abs(diff_pp) <= SUCCESS_PP)) if not ok]
    bad += bool(out)
    variant = r["variant"] + (f" [{r['sidecar']}]" if r.get("sidecar") else "")
    print(f"{r['scenario']:10} {variant:15} {s['latency_ms']['p50']:9.1f} {r['latency_ms']['p50']:9.1f} {p50:6.3f} "
          f"{s['latency_ms']['p99']:9.1f} {r['latency_ms']['p99']:9.1f} {p99:6.3f} "
          f"{100*s['success_rate']:6.2f}% {100*r['success_rate']:6.2f}% {diff_pp:+6.2f}  "
          f"{'NO: ' + ', '.join(out) if out else 'yes'}")
print(f"bounds: p50 ratio within ±{P50:.0%}, p99 ratio within ±{P99:.0%}, success within ±{SUCCESS_PP:g} percentage point")
print(f"lab results: {sys.argv[2]}")
sys.exit(1 if bad else 0)
PY
