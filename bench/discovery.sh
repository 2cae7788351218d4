#!/usr/bin/env bash
# Endpoint discovery under load (issue #22): 200 req/s for DURATION (30 s) through the proxy while
# the upstream's endpoint set changes every second. Four backends (single-process nginx) on
# 127.0.0.1; the upstream finds its endpoints in a file (`discovery: {file: ..., interval: 100ms}`),
# which a loop replaces whole (write, then rename) every second with the next of six sets of two or
# three backends, so every backend leaves and joins again and no set equals the one before.
# Backends that leave keep running (as a Kubernetes pod keeps serving while it drains).
# The file source goes through the same apply path as a DNS answer (crates/proxy/src/egress/
# discovery.rs); the DNS lookup itself is tested against `localhost` in crates/proxy/tests.
# Prints the load generator's counts and the proxy's discovery metrics.
# Target (issue #22): 0 failed requests. No retries are configured: a request sent to an endpoint
# as it leaves must be answered by that endpoint.
# Env: DURATION (30), RATE (200).
source "$(dirname "$0")/lib.sh"
DURATION=${DURATION:-30}; RATE=${RATE:-200}
build_tailguard; install_debian_peers

PROXY=18280; ADMIN=18281; BACKENDS=(18291 18292 18293 18294)
for p in "${BACKENDS[@]}"; do nginx_static "$p"; done
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

# The set changes every second while the load runs.
(
  n=1
  while :; do sleep 1; write_set $((n % ${#SETS[@]})); n=$((n + 1)); done
) &
PIDS+=("$!")
"$TG" load "http://127.0.0.1:$PROXY/" --rate "$RATE" --duration "${DURATION}s" --json "$WORK/load.json" >/dev/null
kill "${PIDS[-1]}" 2>/dev/null || true

changes=$(grep -c 'endpoints from file' "$WORK/tg.log" || true)
metrics=$(curl -s "http://127.0.0.1:$ADMIN/metrics")
errors=$(echo "$metrics" | awk '/^tailguard_egress_discovery_errors_total/ { print $2 }')
per_backend=$(for p in "${BACKENDS[@]}"; do
  echo "$metrics" | awk -v e="127.0.0.1:$p" '$1 ~ "^tailguard_egress_attempts_total" && index($1, e) { printf "%s:%s ", e, $2 }'
done)
echo
echo "discovery: $RATE req/s for ${DURATION} s through the proxy, endpoint set changed every second; $(nproc) cores shared"
python3 - "$WORK/load.json" <<PY
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
print(f"requests {r['requests']}  succeeded {r['succeeded']}  failed {r['failed']}  timed out {r['timed_out']}  rejected {r['rejected']}")
print(f"latency ms: p50 {r['latency_ms']['p50']}  p99 {r['latency_ms']['p99']}  max {r['latency_ms']['max']}")
print(f"set changes applied by the proxy: $changes;  discovery errors: $errors")
print("attempts per backend: $per_backend")
bad = r['failed'] + r['timed_out'] + r['rejected']
print(f"target 0 failed requests: {bad}  {'met' if bad == 0 else 'MISSED'}")
PY
