#!/usr/bin/env bash
# Hedging (issue #3): three `tailguard serve` backends of bench/hedging.yaml (10 ms; replica 2 answers
# 10 % of its requests 10x slower), two tailguard proxies (egress, round robin, no retries) in front
# of the same three: one unhedged, one with a percentile hedge (p95, max_extra 5 %).
# Open loop at RATE req/s for DUR, RUNS runs each, measured with `tailguard load` and cross-checked
# with vegeta at the same rate. Extra load = Δhedges_total / Δrequests_total from the proxy's /metrics.
# Target: hedged p99 <= 0.3 x unhedged p99 with <= 5 % extra load. Env: RUNS (3), RATE (300), DUR (10s).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}; RATE=${RATE:-300}; DUR=${DUR:-10s}
build_tailguard; install_vegeta
FILE=$ROOT/bench/hedging.yaml
B=(18180 18181 18182); P_UN=18190; P_HE=18191; A_UN=18195; A_HE=18196
for r in 0 1 2; do
  sc=normal; [ "$r" = 2 ] && sc=slow
  start "serve$r" "$TG" serve "$FILE" --service backend --replica $r --scenario $sc --listen 127.0.0.1:${B[$r]}
done
proxy_cfg() {   # PORT ADMIN HEDGE
  cat <<CONF
egress:
  listen: 127.0.0.1:$1
  upstreams:
    backend:
      endpoints: [127.0.0.1:${B[0]}, 127.0.0.1:${B[1]}, 127.0.0.1:${B[2]}]
      match: {path_prefix: /}
      policy:
        balancer: {kind: round-robin}
        retry: {max_attempts: 1}
        hedge: $3
admin:
  listen: 127.0.0.1:$2
CONF
}
proxy_cfg $P_UN $A_UN '{kind: none}' >"$WORK/unhedged.yaml"
proxy_cfg $P_HE $A_HE '{kind: percentile, percentile: 95, max_extra: 0.05}' >"$WORK/hedged.yaml"
start unhedged "$TG" proxy --config "$WORK/unhedged.yaml"
start hedged "$TG" proxy --config "$WORK/hedged.yaml"
for p in "${B[@]}" $P_UN $P_HE $A_UN $A_HE; do wait_port "$p"; done

# metric ADMIN NAME: the sum of NAME's samples on the proxy's /metrics
metric() {
  curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $2 } END { print s + 0 }'
}
declare -A TG50 TG99 VG50 VG99 EXTRA
for run in $(seq 1 "$RUNS"); do
  echo "run $run/$RUNS ..." >&2
  for v in unhedged hedged; do
    port=$P_UN; adm=$A_UN; [ $v = hedged ] && { port=$P_HE; adm=$A_HE; }
    url=http://127.0.0.1:$port/
    h0=$(metric $adm tailguard_egress_hedges_total); q0=$(metric $adm tailguard_egress_requests_total)
    "$TG" load "$url" --rate "$RATE" --duration "$DUR" --warmup 2s --json "$WORK/$v.json" >/dev/null 2>&1
    h1=$(metric $adm tailguard_egress_hedges_total); q1=$(metric $adm tailguard_egress_requests_total)
    ok=$(jget "$WORK/$v.json" 'r["success_rate"]')
    python3 -c "import sys; sys.exit(0 if $ok == 1.0 else 1)" || echo "warning: $v: success rate $ok" >&2
    TG50[$v]+="$(jget "$WORK/$v.json" 'r["latency_ms"]["p50"]') "; TG99[$v]+="$(jget "$WORK/$v.json" 'r["latency_ms"]["p99"]') "
    EXTRA[$v]+="$(python3 -c "print(($h1 - $h0) / max(1, $q1 - $q0))") "
    echo "GET $url" | timeout 120 "$VEGETA" attack -rate="$RATE" -duration="$DUR" >"$WORK/$v.bin"
    "$VEGETA" report -type=json <"$WORK/$v.bin" >"$WORK/$v.vj"
    VG50[$v]+="$(python3 -c "import json; print(json.load(open('$WORK/$v.vj'))['latencies']['50th'] / 1e6)") "
    VG99[$v]+="$(python3 -c "import json; print(json.load(open('$WORK/$v.vj'))['latencies']['99th'] / 1e6)") "
  done
done
echo
echo "hedging: 3 backends of 10 ms, one answering 10 % of its requests 10x slower; round robin; open loop $RATE req/s, $DUR; medians of $RUNS runs"
printf '%-10s %16s %16s %12s %12s %10s\n' variant "load p50 ms" "load p99 ms" "vegeta p50" "vegeta p99" "extra %"
declare -A M
for v in unhedged hedged; do
  M[t50$v]=$(median ${TG50[$v]}); M[t99$v]=$(median ${TG99[$v]}); M[v50$v]=$(median ${VG50[$v]}); M[v99$v]=$(median ${VG99[$v]}); M[x$v]=$(median ${EXTRA[$v]})
  printf '%-10s %16.2f %16.2f %12.2f %12.2f %10.2f\n' $v "${M[t50$v]}" "${M[t99$v]}" "${M[v50$v]}" "${M[v99$v]}" "$(python3 -c "print(100 * ${M[x$v]})")"
done
python3 - <<PY
t = ${M[t99hedged]} / ${M[t99unhedged]}; v = ${M[v99hedged]} / ${M[v99unhedged]}; x = ${M[xhedged]}
ok = lambda b: "met" if b else "MISSED"
print()
print(f"hedged p99 / unhedged p99: tailguard load {t:.2f}, vegeta {v:.2f}   (target <= 0.3: {ok(t <= 0.3 and v <= 0.3)})")
print(f"extra load (hedges / requests): {100 * x:.2f} %   (target <= 5 %: {ok(x <= 0.05)})")
PY
