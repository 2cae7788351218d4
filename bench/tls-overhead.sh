#!/usr/bin/env bash
# mTLS overhead (issue #22): what TLS with client certificates costs the tailguard proxy, against
# its own cleartext and against HAProxy doing the same, all on 127.0.0.1 in front of one backend
# (a single-process nginx serving a 3-byte file, cleartext), one worker each, load from
# `tailguard load` (which presents the client certificate). Every proxy uses the same
# certificates, made here with openssl (EC P-256, one CA for the server and the client).
# Each measurement is the median of RUNS runs, the proxies interleaved within each run.
#   CPU/request: the proxy's utime+stime (/proc/PID/stat) over a closed-loop run (64 clients on
#                kept-alive connections, DUR after a 1 s warm-up) / its requests
#   added p50  : open loop 1,000 req/s for DUR: p50 through the proxy − p50 direct to the backend
#                (the client's own TLS work is part of a TLS proxy's figure, as it is of a caller's)
# Env: RUNS (3), DUR (5s).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}; DUR=${DUR:-5s}
build_tailguard; install_debian_peers
command -v openssl >/dev/null || { apt-get update -qq && apt-get install -y -qq openssl >/dev/null; }

BACKEND=18180; P_TG=18181; P_TGS=18182; P_HA=18183; P_HAS=18184
nginx_static $BACKEND

# The certificates: a CA, the proxies' server certificate (valid for 127.0.0.1) and the load
# generator's client certificate.
PKI=$WORK/pki; mkdir -p "$PKI"
ec_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ec_key "$PKI/ca-key.pem"
openssl req -x509 -new -key "$PKI/ca-key.pem" -subj "/CN=tailguard bench CA" -days 2 -out "$PKI/ca.pem" 2>/dev/null
leaf() {   # leaf NAME SAN EKU
  ec_key "$PKI/$1-key.pem"
  openssl req -new -key "$PKI/$1-key.pem" -subj "/CN=$1" -out "$PKI/$1.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\n' "$2" "$3" >"$PKI/$1.ext"
  openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/ca.pem" -CAkey "$PKI/ca-key.pem" -CAcreateserial -days 2 \
    -extfile "$PKI/$1.ext" -out "$PKI/$1.pem" 2>/dev/null
}
leaf server "IP:127.0.0.1,DNS:proxy.test" serverAuth
leaf client "DNS:client.test" clientAuth
cat "$PKI/server.pem" "$PKI/server-key.pem" >"$PKI/server-bundle.pem"   # HAProxy's crt: both in one file

proxy_file "$WORK/tg.yaml" $P_TG $BACKEND
proxy_file "$WORK/tgs.yaml" $P_TGS $BACKEND
cat >>"$WORK/tgs.yaml" <<CONF
  tls: {cert: $PKI/server.pem, key: $PKI/server-key.pem, client_ca: $PKI/ca.pem}
CONF
start tg "$TG" proxy --config "$WORK/tg.yaml" --workers 1; PID_TG=$LAST_PID
start tgs "$TG" proxy --config "$WORK/tgs.yaml" --workers 1; PID_TGS=$LAST_PID
haproxy_file "$WORK/ha.cfg" $P_HA $BACKEND
start ha /usr/sbin/haproxy -db -f "$WORK/ha.cfg"; PID_HA=$LAST_PID
haproxy_file "$WORK/has.cfg" $P_HAS $BACKEND
sed -i "s|bind 127.0.0.1:$P_HAS|bind 127.0.0.1:$P_HAS ssl crt $PKI/server-bundle.pem ca-file $PKI/ca.pem verify required alpn h2,http/1.1|" "$WORK/has.cfg"
start has /usr/sbin/haproxy -db -f "$WORK/has.cfg"; PID_HAS=$LAST_PID

NAMES=(tailguard tailguard-mtls haproxy haproxy-mtls)
declare -A PORT=([tailguard]=$P_TG [tailguard-mtls]=$P_TGS [haproxy]=$P_HA [haproxy-mtls]=$P_HAS)
declare -A PID=([tailguard]=$PID_TG [tailguard-mtls]=$PID_TGS [haproxy]=$PID_HA [haproxy-mtls]=$PID_HAS)
declare -A URL
for n in "${NAMES[@]}"; do wait_port "${PORT[$n]}"; URL[$n]=http://127.0.0.1:${PORT[$n]}/; done
MTLS=(--cacert "$PKI/ca.pem" --cert "$PKI/client.pem" --key "$PKI/client-key.pem")
URL[tailguard-mtls]=https://127.0.0.1:$P_TGS/; URL[haproxy-mtls]=https://127.0.0.1:$P_HAS/
declare -A CPU P50
P50_DIRECT=()

# the summaries go to the JSON files; errors are shown
load() { "$TG" load "$@" >/dev/null 2>"$WORK/load.err" || { cat "$WORK/load.err" >&2; return 1; }; }
args() { case "$1" in *-mtls) printf '%s\n' "${MTLS[@]}";; esac; }

for run in $(seq 1 "$RUNS"); do
  echo "run $run/$RUNS ..." >&2
  load http://127.0.0.1:$BACKEND/ --rate 1000 --duration "$DUR" --warmup 1s --json "$WORK/d.json"
  P50_DIRECT+=("$(jget "$WORK/d.json" 'r["latency_ms"]["p50"]')")
  for n in "${NAMES[@]}"; do
    mapfile -t extra < <(args "$n")
    load "${URL[$n]}" "${extra[@]}" --clients 64 --duration 1s                      # warm-up
    c0=$(cpu_ticks "${PID[$n]}")
    load "${URL[$n]}" "${extra[@]}" --clients 64 --duration "$DUR" --json "$WORK/t.json"
    c1=$(cpu_ticks "${PID[$n]}")
    req=$(jget "$WORK/t.json" 'r["requests"]'); ok=$(jget "$WORK/t.json" 'r["succeeded"]')
    [ "$ok" = "$req" ] || echo "warning: $n: $((req - ok)) of $req failed in the throughput run" >&2
    CPU[$n]+="$(python3 -c "print(($c1 - $c0) / $HZ / $req * 1e6)") "     # µs per request
  done
  for n in "${NAMES[@]}"; do
    mapfile -t extra < <(args "$n")
    load "${URL[$n]}" "${extra[@]}" --rate 1000 --duration "$DUR" --warmup 1s --json "$WORK/p.json"
    ok=$(jget "$WORK/p.json" 'r["succeeded"]'); req=$(jget "$WORK/p.json" 'r["requests"]')
    [ "$ok" = "$req" ] || echo "warning: $n: $((req - ok)) of $req failed in the latency run" >&2
    P50[$n]+="$(jget "$WORK/p.json" 'r["latency_ms"]["p50"]') "
  done
done

pd=$(median "${P50_DIRECT[@]}")
echo
echo "mTLS overhead: backend nginx (1 process, cleartext) on 127.0.0.1; medians of $RUNS runs; $(nproc) cores shared by load, proxy and backend"
printf '%-16s %12s %12s %14s\n' proxy "CPU µs/req" "p50 ms@1k" "added p50 ms"
declare -A M_CPU M_ADD
for n in "${NAMES[@]}"; do
  M_CPU[$n]=$(median ${CPU[$n]})
  p=$(median ${P50[$n]}); M_ADD[$n]=$(python3 -c "print(round($p - $pd, 3))")
  printf '%-16s %12.2f %12.3f %14.3f\n' "$n" "${M_CPU[$n]}" "$p" "${M_ADD[$n]}"
done
printf '%-16s %12s %12.3f\n' direct - "$pd"
echo
python3 - <<PY
cpu = {n: float(v) for n, v in [$(for n in "${NAMES[@]}"; do printf '("%s", %s), ' "$n" "${M_CPU[$n]}"; done)]}
add = {n: float(v) for n, v in [$(for n in "${NAMES[@]}"; do printf '("%s", %s), ' "$n" "${M_ADD[$n]}"; done)]}
def ratio(a, b): return f"{a / b:.2f}x" if b > 0 else "n/a"
print(f"tailguard mTLS / tailguard cleartext: CPU/request {ratio(cpu['tailguard-mtls'], cpu['tailguard'])}, "
      f"+{cpu['tailguard-mtls'] - cpu['tailguard']:.2f} µs; added p50 +{(add['tailguard-mtls'] - add['tailguard']) * 1000:.0f} µs")
print(f"HAProxy mTLS / HAProxy cleartext:     CPU/request {ratio(cpu['haproxy-mtls'], cpu['haproxy'])}, "
      f"+{cpu['haproxy-mtls'] - cpu['haproxy']:.2f} µs; added p50 +{(add['haproxy-mtls'] - add['haproxy']) * 1000:.0f} µs")
print(f"tailguard mTLS / HAProxy mTLS:        CPU/request {ratio(cpu['tailguard-mtls'], cpu['haproxy-mtls'])}; "
      f"added p50 {ratio(add['tailguard-mtls'], add['haproxy-mtls'])} ({add['tailguard-mtls'] * 1000:.0f} vs {add['haproxy-mtls'] * 1000:.0f} µs)")
PY
