#!/usr/bin/env bash
# Adaptive admission in front of applications we did not write (issue #36: never refuse below
# capacity, keep admitted requests fast above it), behind one proxy with the recommended egress
# and an ingress, `admission: {kind: adaptive}` against `{kind: none}`, measured in the same run.
# APP picks the application (bench/apps/):
#   python  Python's http.server (plain-app.py: HTTP/1.0, listen backlog 5, 1 ms of work, about
#           560 requests/s at most on a 2-core machine); RATES default "300 850"
#   node    Node's http server (event-loop-app.js: one event loop, 1 ms of CPU, keep-alive,
#           about 900 requests/s); RATES default "500 1300"
#   go      Go's net/http with 4 workers of 20 ms (worker-pool/: 200 requests/s); RATES
#           default "150 300"
# One replica behind its egress: no refusal has a fallback, so adaptive admission refuses only
# what would miss the 2 s deadline the egress sets (docs/policies.md, "Only where a refusal costs
# little"). Poisson arrivals, 5 s of them (at least 1,500 requests), users giving up after 2 s; RUNS (3)
# of each. Prints per run the requests refused (429), successes per second and the successes'
# p50 and p99 (and adaptive admission's limit and idle latency at the end); then per rate the
# median refused and the median ratio of successes/s to no admission's. Target: none refused
# below capacity. Env: BENCH_TG (a binary to use), APP, RATES, RUNS.
source "$(dirname "$0")/lib.sh"
build_tailguard
RUNS=${RUNS:-3}
APP=${APP:-python}
case "$APP" in
  python) app_cmd=(python3 bench/apps/plain-app.py); default_rates="300 850" ;;
  node) app_cmd=(node bench/apps/event-loop-app.js); default_rates="500 1300" ;;
  go)
    (cd bench/apps/worker-pool && go build -o "$WORK/worker-pool" .) || { echo "go build failed" >&2; exit 1; }
    app_cmd=("$WORK/worker-pool"); default_rates="150 300" ;;
  *) echo "APP: want python, node or go, got '$APP'" >&2; exit 2 ;;
esac
app_args() { [ "$APP" = go ] && echo "$1 4 20ms" || echo "$1"; }
APP_PORT=28480 EGRESS=24480 INGRESS=24483 ADMIN=29480
for kind in adaptive none; do
  cat >"$WORK/$kind.yaml" <<YAML
egress:
  listen: 127.0.0.1:$EGRESS
  upstreams:
    app:
      endpoints: [127.0.0.1:$INGRESS]
      policy: {balancer: {kind: prequal}, outlier: {}, timeout: {kind: adaptive}, hedge: {kind: adaptive}, deadline: 2s}
ingress:
  listen: 127.0.0.1:$INGRESS
  app: 127.0.0.1:$APP_PORT
  admission: {kind: $kind}
admin:
  listen: 127.0.0.1:$ADMIN
YAML
done
# metric NAME: NAME's value on the proxy's /metrics
metric() {
  curl -s "http://127.0.0.1:$ADMIN/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}
# one_run KIND RATE N: prints "refused successes_per_s p50_ms p99_ms limit base_ms" (the
# admission's limit and learnt idle latency at the end, from the ingress's metrics)
one_run() {
  local app proxy
  # shellcheck disable=SC2046
  start app "${app_cmd[@]}" $(app_args "$APP_PORT"); app=$LAST_PID
  start proxy "$TG" proxy --config "$WORK/$1.yaml"; proxy=$LAST_PID
  wait_port "$APP_PORT"; wait_port "$EGRESS"
  "$TG" load --rate "$2" --poisson --requests "$3" --timeout 2s --json "$WORK/out.json" \
    "http://127.0.0.1:$EGRESS/" >/dev/null 2>"$WORK/load.log" || { cat "$WORK/load.log" >&2; exit 1; }
  local limit base
  limit=$(metric tailguard_ingress_admission_limit); base=$(metric tailguard_ingress_admission_base_seconds)
  kill "$proxy" "$app"; wait "$proxy" "$app" 2>/dev/null || true
  python3 - "$WORK/out.json" "$limit" "$base" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
base_ms = round(float(sys.argv[3] or 0) * 1000, 2)
print(r["rejected"], round(r["throughput_rps"], 1), r["latency_ms"]["p50"], r["latency_ms"]["p99"], sys.argv[2] or 0, base_ms)
PY
}
for rate in ${RATES:-$default_rates}; do
  n=$((rate * 5 > 1500 ? rate * 5 : 1500))
  : >"$WORK/rate.txt"
  for run in $(seq 1 "$RUNS"); do
    for kind in none adaptive; do
      read -r refused goodput p50 p99 limit base < <(one_run "$kind" "$rate" "$n")
      learnt=""
      if [ "$kind" = adaptive ]; then learnt=", learnt limit $limit and idle latency $base ms"; fi
      echo "$APP, rate $rate/s run $run $kind: refused $refused, successes $goodput/s, p50 $p50 ms, p99 $p99 ms$learnt"
      echo "$run $kind $refused $goodput" >>"$WORK/rate.txt"
    done
  done
  python3 - "$WORK/rate.txt" "$rate" "$APP" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
by = {(r[0], r[1]): (int(r[2]), float(r[3])) for r in rows}
runs = sorted({r[0] for r in rows})
refused = statistics.median(by[(k, "adaptive")][0] for k in runs)
ratio = statistics.median(by[(k, "adaptive")][1] / max(by[(k, "none")][1], 1e-9) for k in runs)
print(f"{sys.argv[3]}, rate {sys.argv[2]}/s: adaptive refused {refused:g} (median), successes/s {ratio:.2f} x no admission's (median)")
PY
done
