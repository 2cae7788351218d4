#!/usr/bin/env bash
# Instructions per proxied request (the development measure; noise-free, unlike CPU time):
# `tailguard proxy --workers 1` under callgrind, with lib.sh's POLICY (`recommended`, default, or
# `round-robin`), in front of bench/proxy-overhead.sh's three endpoints (each a single-process nginx
# serving a 3-byte file behind a tailguard ingress, not under callgrind) on 127.0.0.1; after WARMUP
# requests the counters are zeroed, then REQUESTS closed-loop requests from CLIENTS clients are
# counted. Prints the proxy's instructions per request (probes and hedges included). SIDE=ingress
# measures an ingress sidecar instead, in front of one such nginx, the load sent straight to it.
# Env: POLICY (recommended), REQUESTS (5000), WARMUP (500), CLIENTS (1), CG_OUT (a path to keep the callgrind dump at),
# PROXY_BIN (the binary measured; target/release/tailguard, e.g. target/pgo/tailguard), CG_ARGS
# (more callgrind options: with "--cache-sim=yes --branch-sim=yes" every event is printed per
# request, cache misses and mispredicted branches among them).
source "$(dirname "$0")/lib.sh"
REQUESTS=${REQUESTS:-5000}; WARMUP=${WARMUP:-500}; CLIENTS=${CLIENTS:-1}
build_tailguard; install_debian_peers
command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 1; }

P_TG=18181
if [ "${SIDE:-egress}" = ingress ]; then
  # One ingress sidecar (the default config: loopback callers trusted, so every response carries
  # its load report and chip) in front of one single-process nginx; load sent straight to it.
  nginx_static 18110
  printf 'ingress:\n  listen: 127.0.0.1:%s\n  app: 127.0.0.1:18110\n' $P_TG >"$WORK/tg.yaml"
else
  sidecar_endpoints 18100
  egress_file "$WORK/tg.yaml" $P_TG "${POLICY:-recommended}"
fi
start tg valgrind --tool=callgrind ${CG_ARGS:-} --callgrind-out-file="$WORK/cg.out" "${PROXY_BIN:-$TG}" proxy --config "$WORK/tg.yaml" --workers 1
PID_TG=$LAST_PID
wait_port $P_TG

load() { "$TG" load "$@" >/dev/null 2>"$WORK/load.err" || { cat "$WORK/load.err" >&2; return 1; }; }
url=http://127.0.0.1:$P_TG/
load "$url" --clients "$CLIENTS" --requests "$WARMUP" --timeout 30s
callgrind_control -z "$PID_TG" >/dev/null
load "$url" --clients "$CLIENTS" --requests "$REQUESTS" --timeout 30s --json "$WORK/r.json"
callgrind_control -d "$PID_TG" >/dev/null
ok=$(jget "$WORK/r.json" 'r["succeeded"]')
[ "$ok" = "$REQUESTS" ] || { echo "only $ok of $REQUESTS requests succeeded" >&2; exit 1; }
# the dump after zeroing: its totals are the measured requests' instructions
dump=$(ls -t "$WORK"/cg.out.* | head -1)
ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
[ -n "${CG_OUT:-}" ] && cp "$dump" "$CG_OUT"
python3 -c "print(f'proxy instructions per request: {$ir / $REQUESTS:.0f} ($REQUESTS requests, $CLIENTS clients)')"
awk -v n="$REQUESTS" '/^events:/ { split($0, names); next }
  /^(summary|totals):/ { if (NF > 2) for (i = 2; i <= NF; i++) printf "%s %.1f\n", names[i], $i / n; exit }' "$dump"
