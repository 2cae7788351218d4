#!/usr/bin/env bash
# A profile-guided (PGO) release build of tailguard: target/pgo/tailguard (`make pgo`).
#
# 1. builds an instrumented binary with the release profile (target/pgo/instrumented);
# 2. trains it on 127.0.0.1 for about 30 s: the proxy in front of a `tailguard serve` replica,
#    driven by `tailguard load` over HTTP/1.1 and h2c, through an egress upstream with the default
#    policies (round robin, no timeout, no retry), one with least-request, an adaptive timeout and
#    retries that goes through the ingress (admission), and two quick simulator runs. Code the
#    training never runs is laid out as cold, so it covers what a sidecar and the simulator do;
# 3. merges the profiles with llvm-profdata (rustup's llvm-tools, added when missing) and builds
#    the optimised binary (target/pgo/optimized), copied to target/pgo/tailguard.
#
# Why: the proxy's cost per request is instruction-cache misses more than instructions (hyper and
# tokio's code is large); the profile lets LLVM inline, lay out and split hot from cold code by
# what a proxy actually runs. bench/RESULTS.md has the measurements. Takes 7.5 min on 2 cores
# from nothing, 3 min once the instrumented build exists.
source "$(dirname "$0")/../bench/lib.sh"
OUT=$ROOT/target/pgo
HOST=$(rustc -vV | awk '/^host:/ { print $2 }')
PROFDATA=$(rustc --print sysroot)/lib/rustlib/$HOST/bin/llvm-profdata
if [ ! -x "$PROFDATA" ]; then
  rustup component add llvm-tools >/dev/null 2>&1 ||
    { echo "llvm-profdata not found and 'rustup component add llvm-tools' failed" >&2; exit 1; }
fi

# The instrumented and optimised builds differ only in RUSTFLAGS, so their symbols match (the
# profile is keyed by symbol name); each has its own target directory so neither rebuilds the other.
# Cargo sees RUSTFLAGS, not the files they name: the profile directory stays put (the instrumented
# build is reused) and the merged profile is named by its hash (a new profile rebuilds).
build() {  # build TARGET_DIR RUSTFLAG
  echo "building $1 ..." >&2
  RUSTFLAGS="${RUSTFLAGS:-} $2" cargo build --release --locked --quiet -p tailguard --target-dir "$OUT/$1"
}
build instrumented "-Cprofile-generate=$OUT/profiles"
rm -rf "$OUT/profiles"   # also what build scripts and proc macros wrote while it built
TGI=$OUT/instrumented/release/tailguard

echo "training ..." >&2
APP=18580; EGRESS=18581; INGRESS=18582
cat >"$WORK/app.yaml" <<YAML
name: pgo-training
services:
  app: { replicas: 1, workers: 0, service_time: { dist: constant, value: 100us } }
workload: { target: app, closed: { clients: 1 }, duration: 1s }
variants: [ { name: as-is } ]
YAML
cat >"$WORK/proxy.yaml" <<YAML
egress:
  listen: 127.0.0.1:$EGRESS
  upstreams:
    direct:
      endpoints: [127.0.0.1:$APP]
      match: {path_prefix: /}
    managed:
      endpoints: [127.0.0.1:$INGRESS]
      match: {path_prefix: /managed}
      policy:
        balancer: {kind: least-request}
        timeout: {kind: adaptive, initial: 50ms}
        retry: {max_attempts: 2}
ingress:
  listen: 127.0.0.1:$INGRESS
  app: 127.0.0.1:$APP
  admission: {kind: fixed, capacity: 1000}
YAML
start app "$TGI" serve "$WORK/app.yaml" --service app --listen 127.0.0.1:$APP; APP_PID=$LAST_PID
start proxy "$TGI" proxy --config "$WORK/proxy.yaml" --workers 1; PROXY_PID=$LAST_PID
fail() { tail -n 20 "$@" >&2; exit 1; }
for p in $APP $EGRESS $INGRESS; do wait_port $p || fail "$WORK/app.log" "$WORK/proxy.log"; done
load() { "$TGI" load "$@" >/dev/null 2>"$WORK/load.err" || fail "$WORK/load.err"; }
load "http://127.0.0.1:$EGRESS/" --clients 64 --duration 8s
load "http://127.0.0.1:$EGRESS/managed" --clients 64 --duration 5s
load "http://127.0.0.1:$EGRESS/managed" --rate 1000 --duration 3s
load "http://127.0.0.1:$EGRESS/" --h2c --clients 16 --duration 3s
load "http://127.0.0.1:$INGRESS/" --clients 16 --duration 3s
# Profiles are written at exit: SIGTERM drains and exits cleanly.
kill -TERM "$PROXY_PID" "$APP_PID"; wait "$PROXY_PID" "$APP_PID" || true
"$TGI" sim examples/bloc.yaml --quick --scenario 40x10 >/dev/null 2>"$WORK/sim.err" || fail "$WORK/sim.err"
"$TGI" sim examples/timeouts.yaml --quick --scenario lossy >/dev/null 2>"$WORK/sim.err" || fail "$WORK/sim.err"

"$PROFDATA" merge -o "$WORK/merged.profdata" "$OUT"/profiles/*.profraw
PROFILE=$OUT/profiles/merged-$(sha256sum "$WORK/merged.profdata" | cut -c1-16).profdata
mv "$WORK/merged.profdata" "$PROFILE"
build optimized "-Cprofile-use=$PROFILE"
cp "$OUT/optimized/release/tailguard" "$OUT/tailguard"
echo "$OUT/tailguard"
