#!/usr/bin/env bash
# gRPC calls at their deadlines through the sidecars, from a client written outside the project:
# ghz (pinned, `go install`) sends unary calls of grpc-go's interop service with a deadline
# shorter than many of them take, 300 at a time over 10 connections, while two busy loops keep
# both cores busy, to
#   egress   the recommended policies (docs/policies.md) over two ingress sidecars (h2c)
#   ingress  one of those ingresses (dynamic admission) in front of grpc-go's interop server
# Each call must end OK or DEADLINE_EXCEEDED: a call failed otherwise (UNAVAILABLE when an HTTP/2
# connection was ended under it) is one the proxy lost. Found this way (2026-12-06): h2's
# defences took cancelled streams for attacks and ended connections with GOAWAY
# ENHANCE_YOUR_CALM, 612-1,794 calls of 30,000 a run (docs/proxy.md, "HTTP/2 under cancellation";
# bench/RESULTS.md).
# Env: RUNS (3), CALLS (30000), DEADLINE (20ms), BENCH_TG (a binary instead of target/release's).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}; CALLS=${CALLS:-30000}; DEADLINE=${DEADLINE:-20ms}
GHZ_VERSION=v0.93.0
build_tailguard
make -s target/tools/grpc-interop-server
if [ ! -x "$BIN/ghz" ]; then
  mkdir -p "$BIN"
  (cd /tmp && GOBIN=$BIN go install "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION") >/dev/null 2>&1 ||
    { echo "ghz install failed" >&2; exit 1; }
fi

APP=(19501 19502); INGRESS=(19511 19512); EGRESS=19520
for i in 0 1; do
  start "app$i" target/tools/grpc-interop-server --port="${APP[$i]}"
  printf 'ingress:\n  listen: 127.0.0.1:%s\n  app: 127.0.0.1:%s\n  protocol: h2c\n  admission: {kind: dynamic}\n' \
    "${INGRESS[$i]}" "${APP[$i]}" >"$WORK/ingress$i.yaml"
  start "ingress$i" "$TG" proxy --config "$WORK/ingress$i.yaml"
done
cat >"$WORK/egress.yaml" <<YAML
egress:
  listen: 127.0.0.1:$EGRESS
  upstreams:
    interop:
      endpoints: [127.0.0.1:${INGRESS[0]}, 127.0.0.1:${INGRESS[1]}]
      protocol: h2c
      policy:
        balancer: {kind: prequal}
        outlier: {}
        timeout: {kind: adaptive}
        hedge: {kind: adaptive}
        retry: {max_attempts: 2}
YAML
start egress "$TG" proxy --config "$WORK/egress.yaml"
for p in "${APP[@]}" "${INGRESS[@]}" "$EGRESS"; do wait_port "$p"; done
start busy1 sh -c 'while :; do :; done'
start busy2 sh -c 'while :; do :; done'

lost=0
printf '%-8s %4s %8s %18s %6s  %s\n' target run OK DEADLINE_EXCEEDED other "other statuses"
for target in egress ingress; do
  port=$([ "$target" = egress ] && echo "$EGRESS" || echo "${INGRESS[0]}")
  for run in $(seq 1 "$RUNS"); do
    "$BIN/ghz" --insecure --proto bench/grpc/testing.proto --call grpc.testing.TestService/UnaryCall \
      -d '{"response_size":100}' -c 300 --connections 10 -n "$CALLS" --timeout "$DEADLINE" -O json \
      "127.0.0.1:$port" >"$WORK/ghz.json" 2>"$WORK/ghz.err" || true
    read -r ok late other detail < <(python3 - "$WORK/ghz.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
codes = report.get("statusCodeDistribution") or {}
ok, late = codes.get("OK", 0), codes.get("DeadlineExceeded", 0)
errors = {k: v for k, v in (report.get("errorDistribution") or {}).items() if "DeadlineExceeded" not in k}
print(ok, late, report["count"] - ok - late, "; ".join(f"{v}x {k}" for k, v in errors.items()) or "-")
PY
)
    printf '%-8s %4s %8s %18s %6s  %s\n' "$target" "$run" "$ok" "$late" "$other" "$detail"
    lost=$((lost + other))
  done
done
echo
echo "target every call OK or DEADLINE_EXCEEDED: $([ "$lost" = 0 ] && echo met || echo "MISSED ($lost calls)")"
