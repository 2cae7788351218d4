#!/usr/bin/env bash
# `tailguard load` vs vegeta (issue #3): both at a constant RATE (5,000) req/s for DUR against the
# same target (a single-process nginx serving a 3-byte file on 127.0.0.1), alternating, RUNS runs;
# prints the median p50 of each and their ratio. Target: within 10 %. Env: RUNS (3), RATE, DUR (10s).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}; RATE=${RATE:-5000}; DUR=${DUR:-10s}
build_tailguard; install_debian_peers; install_vegeta
PORT=18280; nginx_static $PORT; url=http://127.0.0.1:$PORT/
TGP=(); VGP=()
for run in $(seq 1 "$RUNS"); do
  echo "run $run/$RUNS ..." >&2
  "$TG" load "$url" --rate "$RATE" --duration "$DUR" --json "$WORK/t.json" >/dev/null 2>&1
  TGP+=("$(jget "$WORK/t.json" 'r["latency_ms"]["p50"]')")
  echo "GET $url" | timeout 120 "$VEGETA" attack -rate="$RATE" -duration="$DUR" >"$WORK/v.bin"
  "$VEGETA" report -type=json <"$WORK/v.bin" >"$WORK/v.json"
  VGP+=("$(python3 -c "import json; print(json.load(open('$WORK/v.json'))['latencies']['50th'] / 1e6)")")
done
t=$(median "${TGP[@]}"); v=$(median "${VGP[@]}")
echo
echo "constant $RATE req/s for $DUR against nginx on 127.0.0.1; medians of $RUNS runs"
echo "tailguard load p50: $t ms   (runs: ${TGP[*]})"
echo "vegeta p50:         $v ms   (runs: ${VGP[*]})"
python3 -c "r = $t / $v; print(f'tailguard/vegeta p50: {r:.2f}  (target within 10 %: {\"met\" if abs(r - 1) <= 0.10 else \"MISSED\"})')"
