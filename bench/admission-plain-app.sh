#!/usr/bin/env bash
# Adaptive admission in front of a plain application (issue #36: never refuse below capacity):
# Python's http.server (bench/plain-app.py: HTTP/1.0, listen backlog 5, 1 ms of work, about 560
# requests/s at most on a 2-core machine) behind one proxy with the recommended egress and an
# ingress, `admission: {kind: adaptive}` against `{kind: none}`, measured in the same run.
# Poisson arrivals: RATES (default "300 850": about 55 % and 150 % of the application's capacity),
# REQUESTS each (1500 at 300/s, 4000 above), users giving up after 2 s; RUNS (3) of each.
# Prints per run the requests refused (429) and successes per second; then per rate the median
# refused and the median ratio of successes/s to no admission's.
# Target: none refused below capacity. Env: BENCH_TG (a binary to use), RATES, RUNS.
source "$(dirname "$0")/lib.sh"
build_tailguard
RUNS=${RUNS:-3}
APP_PORT=28480 EGRESS=24480 INGRESS=24483 ADMIN=29480
for kind in adaptive none; do
  cat >"$WORK/$kind.yaml" <<YAML
egress:
  listen: 127.0.0.1:$EGRESS
  upstreams:
    app:
      endpoints: [127.0.0.1:$INGRESS]
      policy: {balancer: {kind: prequal}, outlier: {}, timeout: {kind: adaptive}, hedge: {kind: adaptive}}
ingress:
  listen: 127.0.0.1:$INGRESS
  app: 127.0.0.1:$APP_PORT
  admission: {kind: $kind}
admin:
  listen: 127.0.0.1:$ADMIN
YAML
done
# one_run KIND RATE N: prints "refused successes_per_s"
one_run() {
  local app proxy
  start app python3 bench/plain-app.py "$APP_PORT"; app=$LAST_PID
  start proxy "$TG" proxy --config "$WORK/$1.yaml"; proxy=$LAST_PID
  wait_port "$APP_PORT"; wait_port "$EGRESS"
  "$TG" load --rate "$2" --poisson --requests "$3" --timeout 2s --json "$WORK/out.json" \
    "http://127.0.0.1:$EGRESS/" >/dev/null 2>"$WORK/load.log" || { cat "$WORK/load.log" >&2; exit 1; }
  kill "$proxy" "$app"; wait "$proxy" "$app" 2>/dev/null || true
  python3 - "$WORK/out.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
refused = r["rejected"]
print(refused, round(r["throughput_rps"], 1))
PY
}
for rate in ${RATES:-300 850}; do
  n=$([ "$rate" -le 300 ] && echo 1500 || echo 4000)
  : >"$WORK/rate.txt"
  for run in $(seq 1 "$RUNS"); do
    for kind in none adaptive; do
      read -r refused goodput < <(one_run "$kind" "$rate" "$n")
      echo "rate $rate/s run $run $kind: refused $refused, successes $goodput/s"
      echo "$run $kind $refused $goodput" >>"$WORK/rate.txt"
    done
  done
  python3 - "$WORK/rate.txt" "$rate" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
by = {(r[0], r[1]): (int(r[2]), float(r[3])) for r in rows}
runs = sorted({r[0] for r in rows})
refused = statistics.median(by[(k, "adaptive")][0] for k in runs)
ratio = statistics.median(by[(k, "adaptive")][1] / max(by[(k, "none")][1], 1e-9) for k in runs)
print(f"rate {sys.argv[2]}/s: adaptive refused {refused:g} (median), successes/s {ratio:.2f} x no admission's (median)")
PY
done
