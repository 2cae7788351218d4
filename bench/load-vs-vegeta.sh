#!/usr/bin/env bash
# `tailguard load` vs vegeta (issue #3): both at a constant RATE (5,000) req/s for DUR against the
# same target, alternating, RUNS runs; prints the median p50 (and p99) of each and their ratio.
# Two targets, both on 127.0.0.1:
#   nginx  : a single-process nginx serving a 3-byte file (answers in ~0.05 ms: the clients' own
#            overheads are most of what is measured)
#   serve2ms: `tailguard serve` of bench/load-target.yaml (a constant 2 ms service time)
# Target: p50 within 10 % on the serve2ms target (a service time a client's overhead is small
# against); the nginx ratio is printed and explained in bench/RESULTS.md.
# Env: RUNS (3), RATE (5000), DUR (10s).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}; RATE=${RATE:-5000}; DUR=${DUR:-10s}
build_tailguard; install_debian_peers; install_vegeta
P_NX=18280; P_SV=18281
nginx_static $P_NX
start serve "$TG" serve "$ROOT/bench/load-target.yaml" --service backend --listen 127.0.0.1:$P_SV
wait_port $P_SV
declare -A URL=([nginx]=http://127.0.0.1:$P_NX/ [serve2ms]=http://127.0.0.1:$P_SV/)
TARGETS=(nginx serve2ms)
declare -A TGP TG99 VGP VG99
for run in $(seq 1 "$RUNS"); do
  echo "run $run/$RUNS ..." >&2
  for t in "${TARGETS[@]}"; do
    url=${URL[$t]}
    "$TG" load "$url" --rate "$RATE" --duration "$DUR" --warmup 1s --json "$WORK/t.json" >/dev/null 2>"$WORK/t.err" ||
      { cat "$WORK/t.err" >&2; exit 1; }
    TGP[$t]+="$(jget "$WORK/t.json" 'r["latency_ms"]["p50"]') "
    TG99[$t]+="$(jget "$WORK/t.json" 'r["latency_ms"]["p99"]') "
    echo "GET $url" | timeout 120 "$VEGETA" attack -rate="$RATE" -duration="$DUR" >"$WORK/v.bin"
    "$VEGETA" report -type=json <"$WORK/v.bin" >"$WORK/v.json"
    VGP[$t]+="$(python3 -c "import json; print(json.load(open('$WORK/v.json'))['latencies']['50th'] / 1e6)") "
    VG99[$t]+="$(python3 -c "import json; print(json.load(open('$WORK/v.json'))['latencies']['99th'] / 1e6)") "
  done
done
echo
echo "constant $RATE req/s for $DUR on 127.0.0.1; medians of $RUNS runs (ms)"
printf '%-9s %12s %12s %12s %12s %10s\n' target "load p50" "vegeta p50" "load p99" "vegeta p99" "p50 ratio"
for t in "${TARGETS[@]}"; do
  a=$(median ${TGP[$t]}); b=$(median ${VGP[$t]}); c=$(median ${TG99[$t]}); d=$(median ${VG99[$t]})
  printf '%-9s %12.3f %12.3f %12.3f %12.3f %10.2f\n' "$t" "$a" "$b" "$c" "$d" "$(python3 -c "print($a / $b)")"
  echo "  runs: load p50 ${TGP[$t]}| vegeta p50 ${VGP[$t]}" >&2
done
a=$(median ${TGP[serve2ms]}); b=$(median ${VGP[serve2ms]})
python3 -c "r = $a / $b; print(f'\ntailguard/vegeta p50 on serve2ms: {r:.2f}  (target within 10 %: {\"met\" if abs(r - 1) <= 0.10 else \"MISSED\"})')"
