#!/usr/bin/env bash
# Endpoint discovery under load (issue #22): RATE (200) req/s for DURATION (30) s through the proxy
# while the upstream's endpoint set changes every second, in two phases of DURATION each:
#   sets:    the set cycles through six sets of two or three of four backends (single-process
#            nginx on 127.0.0.1), so every backend leaves and joins again; backends that leave
#            keep running (as a Kubernetes pod keeps serving while it drains);
#   rolling: a rolling restart: each second the next backend leaves the set, is stopped 300 ms
#            later (SIGTERM: its connections close), started again, and joins at the next change.
# The upstream finds its endpoints in a file (`discovery: {file: ..., interval: 100ms}`), replaced
# whole (write, then rename) at each change. The file source goes through the same apply path as
# a DNS answer (crates/proxy/src/egress/discovery.rs); editing /etc/hosts or the system resolver
# for a DNS version is not allowed here, and the DNS lookup itself is tested against `localhost`
# in crates/proxy/tests/discovery.rs.
# Target (issue #22): 0 failed requests. No retries are configured: a request sent to an endpoint
# as it leaves must be answered by that endpoint.
# Env: DURATION (30), RATE (200).
source "$(dirname "$0")/lib.sh"
DURATION=${DURATION:-30}; RATE=${RATE:-200}
build_tailguard; install_debian_peers

PROXY=18280; ADMIN=18281; BACKENDS=(18291 18292 18293 18294)
declare -A NGINX   # port -> pid of its nginx
for p in "${BACKENDS[@]}"; do nginx_static "$p"; NGINX[$p]=$LAST_PID; done
SETS=("0 1" "1 2 3" "2 3" "0 3" "0 1 2" "1 3")
write_set() {   # write_set INDEX: the file lists the backends of SETS[INDEX]
  local i
  : >"$WORK/endpoints.next"
  for i in ${SETS[$1]}; do echo "127.0.0.1:${BACKENDS[$i]}" >>"$WORK/endpoints.next"; done
  mv "$WORK/endpoints.next" "$WORK/endpoints"
}
write_set 0
cat >"$WORK/tg.yaml" <<CONF
egress:
  listen: 127.0.0.1:$PROXY
  upstreams:
    backend:
      discovery: {file: $WORK/endpoints, interval: 100ms}
      policy:
        balancer: {kind: least-request}
        retry: {max_attempts: 1}
admin: {listen: 127.0.0.1:$ADMIN}
CONF
start tg "$TG" proxy --config "$WORK/tg.yaml" --workers 1
wait_port $PROXY

# phase NAME CHANGE: the load runs in the background while CHANGE N is called every second
phase() {
  local name=$1 change=$2 n=1 load_pid
  "$TG" load "http://127.0.0.1:$PROXY/" --rate "$RATE" --duration "${DURATION}s" --json "$WORK/$name.json" \
    >/dev/null 2>"$WORK/$name.err" &
  load_pid=$!; PIDS+=("$load_pid")
  while kill -0 "$load_pid" 2>/dev/null; do sleep 1; "$change" "$n"; n=$((n + 1)); done
  wait "$load_pid" || { cat "$WORK/$name.err" >&2; exit 1; }
  CHANGES[$name]=$((n - 1))
}
cycle_sets() { write_set $(($1 % ${#SETS[@]})); }
rolling() {   # backend N mod 4 leaves; stopped 300 ms later, started again; back at the next call
  local i=$(($1 % ${#BACKENDS[@]})) j port
  : >"$WORK/endpoints.next"
  for j in "${!BACKENDS[@]}"; do [ "$j" != "$i" ] && echo "127.0.0.1:${BACKENDS[$j]}" >>"$WORK/endpoints.next"; done
  mv "$WORK/endpoints.next" "$WORK/endpoints"
  sleep 0.3
  port=${BACKENDS[$i]}
  kill "${NGINX[$port]}"; wait "${NGINX[$port]}" 2>/dev/null || true
  nginx_static "$port"; NGINX[$port]=$LAST_PID
}
declare -A CHANGES
echo "phase sets ..." >&2; phase sets cycle_sets
echo "phase rolling ..." >&2; phase rolling rolling

metrics=$(curl -s "http://127.0.0.1:$ADMIN/metrics")
errors=$(echo "$metrics" | awk '/^tailguard_egress_discovery_errors_total/ { print $2 }')
applied=$(grep -c 'endpoints from file' "$WORK/tg.log" || true)
echo
echo "discovery: $RATE req/s for ${DURATION} s per phase through the proxy (one worker), the endpoint set changed every second; $(nproc) cores shared"
echo "set changes written: sets ${CHANGES[sets]}, rolling ${CHANGES[rolling]}; applied by the proxy: $applied; discovery errors: $errors"
python3 - "$WORK/sets.json" "$WORK/rolling.json" <<PY
import json, sys
bad_all = 0
for name, path in zip(["sets", "rolling"], sys.argv[1:]):
    r = json.load(open(path))["runs"][0]
    bad = r["failed"] + r["timed_out"] + r["rejected"]
    bad_all += bad
    l = r["latency_ms"]
    print(f"{name:8} requests {r['requests']}  succeeded {r['succeeded']}  failed {r['failed']}  timed out {r['timed_out']}  rejected {r['rejected']}  p50 {l['p50']} ms  p99 {l['p99']} ms  max {l['max']} ms")
print(f"target 0 failed requests: {bad_all}  {'met' if bad_all == 0 else 'MISSED'}")
PY
