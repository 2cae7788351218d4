#!/usr/bin/env bash
# Proxy overhead (issue #3): tailguard proxy vs HAProxy vs nginx, one worker each, in front of the
# same backend (a single-process nginx serving a 3-byte file), all on 127.0.0.1, load from
# `tailguard load`. Each measurement is the median of RUNS runs, the proxies interleaved per run.
#   throughput : closed loop, 64 clients, DUR (5 s; after a 1 s warm-up run)
#   CPU/request: the proxy's utime+stime (/proc/PID/stat) over that run / its requests
#   added p50  : open loop 1,000 req/s for DUR: p50 through the proxy − p50 direct to the backend
#   RSS        : VmRSS (/proc/PID/status) while bench/hold.py holds 1,000 keep-alive connections,
#                each sending a GET once a second (turns spread evenly: 1,000 req/s, no bursts)
# Both tailguard builds are measured: `make build`'s (target/release) and the profile-guided one
# (`make pgo`, target/pgo; built here by scripts/pgo-build.sh, 3–8 min, unless BENCH_NO_BUILD=1 finds
# it; PGO=0 leaves it out).
# Targets: throughput >= 0.9 x HAProxy, CPU/req <= HAProxy, added p50 <= 0.2 ms, RSS < 30 MB.
# Env: RUNS (3), DUR (5s), PGO (1).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}; DUR=${DUR:-5s}
build_tailguard; install_debian_peers
TG_PGO=$ROOT/target/pgo/tailguard
if [ "${PGO:-1}" = 1 ] && { [ "${BENCH_NO_BUILD:-0}" != 1 ] || [ ! -x "$TG_PGO" ]; }; then
  scripts/pgo-build.sh >/dev/null
fi
ulimit -n 8192 2>/dev/null || true   # 1,000 held connections, on both ends, in processes started from here

BACKEND=18080; P_TG=18081; P_HA=18082; P_NX=18083; P_PGO=18084; ADMIN=18091
nginx_static $BACKEND; PID_BACKEND=$LAST_PID

proxy_file "$WORK/tg.yaml" $P_TG $BACKEND $ADMIN
start tg "$TG" proxy --config "$WORK/tg.yaml" --workers 1; PID_TG=$LAST_PID
declare -A PORT=([tailguard]=$P_TG) PID=([tailguard]=$PID_TG)
TGS=(tailguard)
if [ "${PGO:-1}" = 1 ]; then
  proxy_file "$WORK/pgo.yaml" $P_PGO $BACKEND
  start pgo "$TG_PGO" proxy --config "$WORK/pgo.yaml" --workers 1
  PORT[tailguard-pgo]=$P_PGO; PID[tailguard-pgo]=$LAST_PID; TGS+=(tailguard-pgo)
fi

haproxy_file "$WORK/haproxy.cfg" $P_HA $BACKEND
start haproxy /usr/sbin/haproxy -db -f "$WORK/haproxy.cfg"; PID_HA=$LAST_PID

mkdir -p "$WORK/nxp"
cat >"$WORK/nxp/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1;
pid $WORK/nxp/nginx.pid; error_log $WORK/nxp/error.log warn;
events { worker_connections 8192; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 60s;
  upstream be { server 127.0.0.1:$BACKEND; keepalive 64; }
  server {
    listen 127.0.0.1:$P_NX;
    location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
CONF
start nginx-proxy /usr/sbin/nginx -p "$WORK/nxp" -c "$WORK/nxp/nginx.conf"; PID_NX=$LAST_PID
PORT+=([haproxy]=$P_HA [nginx]=$P_NX); PID+=([haproxy]=$PID_HA [nginx]=$PID_NX)
NAMES=("${TGS[@]}" haproxy nginx)
for n in "${NAMES[@]}"; do wait_port "${PORT[$n]}"; done
declare -A THR CPU P50 RSS
P50_DIRECT=()

# the summaries go to the JSON files; errors are shown
load() { "$TG" load "$@" >/dev/null 2>"$WORK/load.err" || { cat "$WORK/load.err" >&2; return 1; }; }

for run in $(seq 1 "$RUNS"); do
  echo "run $run/$RUNS ..." >&2
  load http://127.0.0.1:$BACKEND/ --rate 1000 --duration "$DUR" --warmup 1s --json "$WORK/d.json"
  P50_DIRECT+=("$(jget "$WORK/d.json" 'r["latency_ms"]["p50"]')")
  # each measure is taken of every proxy back to back, so that all see the same moments of a
  # shared machine
  for n in "${NAMES[@]}"; do
    url=http://127.0.0.1:${PORT[$n]}/
    load "$url" --clients 64 --duration 1s                      # warm-up
    c0=$(cpu_ticks "${PID[$n]}")
    load "$url" --clients 64 --duration "$DUR" --json "$WORK/t.json"
    c1=$(cpu_ticks "${PID[$n]}")
    req=$(jget "$WORK/t.json" 'r["requests"]'); ok=$(jget "$WORK/t.json" 'r["succeeded"]')
    [ "$ok" = "$req" ] || echo "warning: $n: $((req - ok)) of $req failed in the throughput run" >&2
    THR[$n]+="$(jget "$WORK/t.json" 'r["throughput_rps"]') "
    CPU[$n]+="$(python3 -c "print(($c1 - $c0) / $HZ / $req * 1e6)") "     # µs per request
  done
  for n in "${NAMES[@]}"; do
    url=http://127.0.0.1:${PORT[$n]}/
    load "$url" --rate 1000 --duration "$DUR" --warmup 1s --json "$WORK/p.json"
    P50[$n]+="$(jget "$WORK/p.json" 'r["latency_ms"]["p50"]') "
  done
  for n in "${NAMES[@]}"; do
    # 1,000 connections held open for 8 s once all are open; RSS and the open connections
    # sampled once a second from the 3rd to the 7th second, the highest kept
    python3 bench/hold.py "${PORT[$n]}" 1000 8 >"$WORK/hold.out" 2>&1 &
    lp=$!; PIDS+=("$lp")
    for _ in $(seq 1 100); do grep -q '^open' "$WORK/hold.out" && break; sleep 0.1; done
    sleep 2; conns=0; rss=0
    for _ in 1 2 3 4 5; do
      sleep 1
      c=$(ss -Htn state established "( sport = :${PORT[$n]} )" | wc -l); [ "$c" -gt "$conns" ] && conns=$c
      k=$(rss_kb "${PID[$n]}"); [ "$k" -gt "$rss" ] && rss=$k
    done
    RSS[$n]+="$rss "
    wait "$lp" || { cat "$WORK/hold.out" >&2; exit 1; }
    [ "$conns" -ge 1000 ] || echo "warning: $n: only $conns connections open when RSS was read" >&2
  done
done

pd=$(median "${P50_DIRECT[@]}")
echo
echo "proxy overhead: backend nginx (1 process) on 127.0.0.1; medians of $RUNS runs; $(nproc) cores shared by load, proxy and backend"
printf '%-14s %14s %12s %12s %14s %10s\n' proxy "throughput/s" "CPU µs/req" "p50 ms@1k" "added p50 ms" "RSS MB@1k"
declare -A M_THR M_CPU M_ADD M_RSS
for n in "${NAMES[@]}"; do
  M_THR[$n]=$(median ${THR[$n]}); M_CPU[$n]=$(median ${CPU[$n]})
  p=$(median ${P50[$n]}); M_ADD[$n]=$(python3 -c "print(round($p - $pd, 3))")
  M_RSS[$n]=$(python3 -c "print(round($(median ${RSS[$n]}) / 1024, 1))")
  printf '%-14s %14.0f %12.2f %12.3f %14.3f %10.1f\n' "$n" "${M_THR[$n]}" "${M_CPU[$n]}" "$p" "${M_ADD[$n]}" "${M_RSS[$n]}"
done
printf '%-14s %14s %12s %12.3f\n' direct - - "$pd"
echo
for t in "${TGS[@]}"; do
  for peer in haproxy nginx; do
    python3 -c "print(f'$t/$peer: throughput {${M_THR[$t]}/${M_THR[$peer]}:.2f}x, CPU/request {${M_CPU[$t]}/${M_CPU[$peer]}:.2f}x, RSS {${M_RSS[$t]}/${M_RSS[$peer]}:.2f}x')"
  done
done
for t in "${TGS[@]}"; do
  python3 - <<PY
thr = ${M_THR[$t]} / ${M_THR[haproxy]}
cpu = ${M_CPU[$t]} / ${M_CPU[haproxy]}
add = ${M_ADD[$t]}
rss = ${M_RSS[$t]}
def v(ok): return "met" if ok else "MISSED"
print()
print("$t:")
print(f"target throughput >= 0.9 x HAProxy: {thr:.2f}x  {v(thr >= 0.9)}")
print(f"target CPU/request <= HAProxy's:    {cpu:.2f}x  {v(cpu <= 1.0)}")
print(f"target added p50 <= 0.2 ms:         {add:.3f} ms  {v(add <= 0.2)}")
print(f"target RSS < 30 MB at 1k conns:     {rss:.1f} MB  {v(rss < 30)}")
PY
done
