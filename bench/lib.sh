# Shared helpers for the bench scripts (sourced, not run). Everything listens on 127.0.0.1, except
# in the network namespaces bench/reliability.sh creates (and removes on exit).
# Every process started through `start` is recorded and stopped by its PID on EXIT.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# BENCH_TG: a tailguard binary to measure and load with instead of building target/release's
TG=${BENCH_TG:-$ROOT/target/release/tailguard}
BIN=${BENCH_BIN:-$ROOT/target/bench-bin}   # where vegeta is installed
WORK=$(mktemp -d /tmp/tailguard-bench.XXXXXX)
PIDS=()
AT_EXIT=()   # commands run on exit once every process is stopped (e.g. removing network namespaces)
cleanup() {
  local p c
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
  for c in "${AT_EXIT[@]:-}"; do [ -n "$c" ] && { $c || true; }; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME CMD...: run CMD in the background, log to $WORK/NAME.log; sets LAST_PID
start() {
  local name=$1; shift
  "$@" >"$WORK/$name.log" 2>&1 &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
}

# wait_port PORT [HOST]: until something accepts on HOST (127.0.0.1):PORT (at most 10 s)
wait_port() {
  local i host=${2:-127.0.0.1}
  for i in $(seq 1 100); do
    (exec 3<>"/dev/tcp/$host/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listening on $host:$1 after 10 s" >&2; return 1
}

# builds target/release/tailguard (3 tries a minute apart, the tree may be mid-edit);
# BENCH_NO_BUILD=1 uses the binary as it is
build_tailguard() {
  local i
  if [ -n "${BENCH_TG:-}" ]; then
    [ -x "$TG" ] || { echo "BENCH_TG=$TG is not an executable" >&2; exit 2; }
    return 0
  fi
  if [ "${BENCH_NO_BUILD:-0}" = 1 ] && [ -x "$TG" ]; then return 0; fi
  for i in 1 2 3; do
    cargo build --release --locked --quiet 2>"$WORK/build.log" && return 0
    echo "cargo build failed (try $i of 3), see below; retrying in 60 s" >&2; tail -5 "$WORK/build.log" >&2
    [ "$i" -lt 3 ] && sleep 60
  done
  exit 1
}

install_debian_peers() {   # haproxy and nginx from Debian
  if [ ! -x /usr/sbin/haproxy ] || [ ! -x /usr/sbin/nginx ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy nginx >/dev/null
  fi
}

install_vegeta() {
  if [ ! -x "$BIN/vegeta" ]; then
    mkdir -p "$BIN"
    (cd /tmp && GOBIN=$BIN go install github.com/tsenart/vegeta/v12@latest) >/dev/null 2>&1 ||
      { echo "vegeta install failed" >&2; exit 1; }
  fi
  VEGETA=$BIN/vegeta
}

# nginx_static PORT: a single-process nginx serving a 3-byte file (master_process off = the one
# process that does the work is the PID we hold)
nginx_static() {
  local port=$1 dir=$WORK/nginx-$1
  mkdir -p "$dir/www" && printf 'ok\n' >"$dir/www/index.html" && printf 'ok\n' >"$dir/www/healthz"
  cat >"$dir/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1;
pid $dir/nginx.pid; error_log $dir/error.log warn;
events { worker_connections 8192; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 60s;
  server { listen 127.0.0.1:$port; root $dir/www; location / { } }
}
CONF
  start "nginx-$port" /usr/sbin/nginx -p "$dir" -c "$dir/nginx.conf"
  wait_port "$port"
}

# proxy_file FILE PORT BACKEND [ADMIN]: a tailguard proxy file whose egress on PORT sends every
# request to BACKEND (round robin over one endpoint, no retries), with an admin listener on ADMIN
proxy_file() {
  {
    cat <<CONF
egress:
  listen: 127.0.0.1:$2
  upstreams:
    backend:
      endpoints: [127.0.0.1:$3]
      match: {path_prefix: /}
      policy:
        balancer: {kind: round-robin}
        retry: {max_attempts: 1}
CONF
    if [ -n "${4:-}" ]; then printf 'admin:\n  listen: 127.0.0.1:%s\n' "$4"; fi
  } >"$1"
}

# haproxy_file FILE PORT BACKEND: one HAProxy thread on PORT in front of BACKEND, connections reused
haproxy_file() {
  cat >"$1" <<CONF
global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  http-reuse always
frontend fe
  bind 127.0.0.1:$2
  default_backend be
backend be
  server s1 127.0.0.1:$3
CONF
}

# What users deploy (bench/proxy-overhead.sh, proxy-builds.sh, proxy-instructions.sh): three
# endpoints, each a single-process nginx behind a tailguard ingress sidecar (`--workers 1`, the
# INGRESS_BIN build, default $TG) that answers Prequal's probes; every egress compared sends to the
# three ingresses. sidecar_endpoints BASE: nginx on BASE+10+i, its ingress on BASE+i (i = 0, 1, 2);
# sets ENDPOINTS (the ingresses' addresses) and INGRESS_PIDS.
sidecar_endpoints() {
  local base=$1 i
  ENDPOINTS=(); INGRESS_PIDS=()
  for i in 0 1 2; do
    nginx_static $((base + 10 + i))
    printf 'ingress:\n  listen: 127.0.0.1:%s\n  app: 127.0.0.1:%s\n' $((base + i)) $((base + 10 + i)) >"$WORK/ingress-$i.yaml"
    start "ingress-$i" "${INGRESS_BIN:-$TG}" proxy --config "$WORK/ingress-$i.yaml" --workers 1
    ENDPOINTS+=("127.0.0.1:$((base + i))"); INGRESS_PIDS+=("$LAST_PID")
  done
  for i in 0 1 2; do wait_port $((base + i)); done
}

# policy_yaml NAME: an egress policy as a YAML flow mapping. `recommended` is docs/policies.md's
# recommendation (examples/peers.yaml's `tailguard` variant); `round-robin` one attempt, no more;
# `unprobed` the recommended policies without Prequal's probes.
policy_yaml() {
  case $1 in
    recommended) echo '{balancer: {kind: prequal}, outlier: {}, timeout: {kind: adaptive}, hedge: {kind: adaptive}, retry: {max_attempts: 2}}' ;;
    round-robin) echo '{balancer: {kind: round-robin}, retry: {max_attempts: 1}}' ;;
    # the recommended policies sending no probes: Prequal picks at random; what the egress costs
    # once the endpoints' load reaches it on responses instead of probes
    unprobed) echo '{balancer: {kind: prequal, probes_per_request: 0}, outlier: {}, timeout: {kind: adaptive}, hedge: {kind: adaptive}, retry: {max_attempts: 2}}' ;;
    *) echo "unknown policy $1 (recommended, round-robin, unprobed)" >&2; return 2 ;;
  esac
}

# egress_file FILE PORT POLICY [ADMIN]: a tailguard egress on PORT sending to ENDPOINTS under
# policy_yaml POLICY, with an admin listener on ADMIN; UPSTREAM_PROTOCOL, if set, is the
# upstream's `protocol` (h2c: HTTP/2 between the egress and the ingress sidecars)
egress_file() {
  local list
  list=$(IFS=,; echo "${ENDPOINTS[*]}")
  printf 'egress:\n  listen: 127.0.0.1:%s\n  upstreams:\n    backend:\n      endpoints: [%s]\n      match: {path_prefix: /}\n      policy: %s\n' \
    "$2" "$list" "$(policy_yaml "$3")" >"$1"
  if [ -n "${UPSTREAM_PROTOCOL:-}" ]; then printf '      protocol: %s\n' "$UPSTREAM_PROTOCOL" >>"$1"; fi
  if [ -n "${4:-}" ]; then printf 'admin:\n  listen: 127.0.0.1:%s\n' "$4" >>"$1"; fi
}

# deployed_haproxy FILE PORT: one HAProxy thread on PORT in front of ENDPOINTS as its manual
# recommends for them (the lab's peer, crates/lab/src/peers/haproxy.rs, with leastconn): a second
# attempt on another server after a connection failure, a timeout or a 5xx; servers with too many
# errors on live traffic marked down (`observe layer7`), checked every 2 s to come back
deployed_haproxy() {
  local i
  cat >"$1" <<CONF
global
  nbthread 1
  maxconn 4000
defaults
  mode http
  option http-keep-alive
  timeout connect 1s
  timeout client 60s
  timeout server 5s
  timeout http-keep-alive 60s
  http-reuse always
frontend fe
  bind 127.0.0.1:$2
  default_backend be
backend be
  balance leastconn
  retries 1
  retry-on conn-failure empty-response response-timeout 500 502 503 504
  option redispatch 1
  option httpchk GET /healthz
CONF
  for i in "${!ENDPOINTS[@]}"; do
    echo "  server s$i ${ENDPOINTS[$i]} check inter 2s rise 1 observe layer7 error-limit 10 on-error mark-down" >>"$1"
  done
}

# deployed_nginx DIR PORT: one nginx process on PORT in front of ENDPOINTS (least_conn; a second
# attempt on the next server after an error, a timeout or a 5xx; a server that failed is left out
# for 10 s, nginx's defaults max_fails=1 fail_timeout=10s); sets LAST_PID
deployed_nginx() {
  local dir=$1 e servers=""
  for e in "${ENDPOINTS[@]}"; do servers+="server $e max_fails=1 fail_timeout=10s; "; done
  mkdir -p "$dir"
  cat >"$dir/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1;
pid $dir/nginx.pid; error_log $dir/error.log warn;
events { worker_connections 8192; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 60s;
  upstream be { least_conn; $servers keepalive 64; }
  server {
    listen 127.0.0.1:$2;
    location / {
      proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_read_timeout 5s;
      proxy_next_upstream error timeout http_500 http_502 http_503 http_504; proxy_next_upstream_tries 2;
    }
  }
}
CONF
  start "nginx-proxy-$2" /usr/sbin/nginx -p "$dir" -c "$dir/nginx.conf"
}

# cpu_ticks PID: utime+stime in clock ticks
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# cpu_ns PID: nanoseconds on a CPU, every thread of PID (/proc/PID/task/*/schedstat): finer than
# clock ticks, which at 1,000 requests/s count a few dozen per run (%.0f: mawk's %d stops at 2^31)
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
HZ=$(getconf CLK_TCK)

# jget FILE EXPR: a field of a tailguard load results JSON, e.g. jget f 'r["latency_ms"]["p50"]'
jget() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]; print($2)" "$1"; }
median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
