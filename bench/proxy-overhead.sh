#!/usr/bin/env bash
# Proxy overhead as users deploy it: one egress (one worker each) in front of three endpoints,
# each a single-process nginx serving a 3-byte file behind a tailguard ingress sidecar that answers
# Prequal's probes (lib.sh, sidecar_endpoints). Compared, in front of the same three endpoints:
#   tailguard     the recommended policies (docs/policies.md: Prequal with outlier ejection, the
#                 adaptive timeout and hedge, a second attempt within the retry budget)
#   tailguard-rr  round robin, one attempt (what a plain reverse proxy does)
#   tailguard-unprobed the recommended policies sending no probes (UNPROBED=1; lib.sh's
#                 `unprobed`): Prequal picks at random, so this row shows what the policies cost
#                 apart from probing
#   tailguard-pgo the recommended policies on the profile-guided build (PGO=1; `make pgo`'s
#                 target/pgo/tailguard, built here by scripts/pgo-build.sh unless BENCH_NO_BUILD=1
#                 finds it)
#   haproxy       `balance leastconn`, a second attempt on another server (`retries 1`, `retry-on`,
#                 `option redispatch`), `observe layer7` ejection with its check (lib.sh)
#   nginx         `least_conn`, `proxy_next_upstream` with 2 tries, max_fails/fail_timeout
# Each measure is the median of RUNS runs; in every run each measure is taken of every proxy back to
# back, so that all see the same moments of a shared machine. All on 127.0.0.1, load from
# `tailguard load`:
#   throughput   : closed loop, 64 clients, DUR (5 s; after a 1 s warm-up run)
#   CPU/req      : the egress's time on a CPU (/proc/PID/task/*/schedstat) over that run / its requests
#   CPU/req @1k  : the same over an open-loop run of 1,000 requests/s for DUR (after 1 s of warm-up)
#   added p50    : that run's p50 − the p50 of the same load sent straight to one ingress
#   RSS          : VmRSS (/proc/PID/status) while bench/hold.py holds 1,000 keep-alive connections,
#                  each sending a GET once a second (turns spread evenly: 1,000 req/s, no bursts)
# Targets, for the recommended policies on `make build`'s binary: throughput >= 1.0 x HAProxy's,
# CPU/request (both loads) <= 1.0 x HAProxy's, added p50 <= 0.2 ms, RSS <= 20 MB.
# Env: RUNS (3), DUR (5s), PGO (0), UNPROBED (0), BENCH_TG (a binary to measure instead of target/release's),
# UPSTREAM_PROTOCOL (h2c: tailguard's egresses speak HTTP/2 to the ingress sidecars; HAProxy and nginx
# keep HTTP/1).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}; DUR=${DUR:-5s}
build_tailguard; install_debian_peers
TG_PGO=$ROOT/target/pgo/tailguard
if [ "${PGO:-0}" = 1 ] && { [ "${BENCH_NO_BUILD:-0}" != 1 ] || [ ! -x "$TG_PGO" ]; }; then
  scripts/pgo-build.sh >/dev/null
fi
ulimit -n 8192 2>/dev/null || true   # 1,000 held connections, on both ends, in processes started from here

sidecar_endpoints 18000
P_TG=18081; P_RR=18082; P_PGO=18083; P_HA=18084; P_NX=18085; P_UP=18086; ADMIN=18091
declare -A PORT PID
egress_file "$WORK/tg.yaml" $P_TG recommended $ADMIN
start tg "$TG" proxy --config "$WORK/tg.yaml" --workers 1
PORT[tailguard]=$P_TG; PID[tailguard]=$LAST_PID
egress_file "$WORK/rr.yaml" $P_RR round-robin
start rr "$TG" proxy --config "$WORK/rr.yaml" --workers 1
PORT[tailguard-rr]=$P_RR; PID[tailguard-rr]=$LAST_PID
TGS=(tailguard tailguard-rr)
if [ "${UNPROBED:-0}" = 1 ]; then
  egress_file "$WORK/unprobed.yaml" $P_UP unprobed
  start unprobed "$TG" proxy --config "$WORK/unprobed.yaml" --workers 1
  PORT[tailguard-unprobed]=$P_UP; PID[tailguard-unprobed]=$LAST_PID; TGS+=(tailguard-unprobed)
fi
if [ "${PGO:-0}" = 1 ]; then
  egress_file "$WORK/pgo.yaml" $P_PGO recommended
  start pgo "$TG_PGO" proxy --config "$WORK/pgo.yaml" --workers 1
  PORT[tailguard-pgo]=$P_PGO; PID[tailguard-pgo]=$LAST_PID; TGS+=(tailguard-pgo)
fi
deployed_haproxy "$WORK/haproxy.cfg" $P_HA
start haproxy /usr/sbin/haproxy -db -f "$WORK/haproxy.cfg"
PORT[haproxy]=$P_HA; PID[haproxy]=$LAST_PID
deployed_nginx "$WORK/nxp" $P_NX
PORT[nginx]=$P_NX; PID[nginx]=$LAST_PID
NAMES=("${TGS[@]}" haproxy nginx)
for n in "${NAMES[@]}"; do wait_port "${PORT[$n]}"; done
declare -A THR CPU CPU1K P50 RSS
P50_DIRECT=()

# the summaries go to the JSON files; errors are shown
load() { "$TG" load "$@" >/dev/null 2>"$WORK/load.err" || { cat "$WORK/load.err" >&2; return 1; }; }
# all_ok NAME FILE WHAT: warns when some requests of a run failed
all_ok() {
  local req ok
  req=$(jget "$2" 'r["requests"]'); ok=$(jget "$2" 'r["succeeded"]')
  [ "$ok" = "$req" ] || echo "warning: $1: $((req - ok)) of $req failed in the $3 run" >&2
}

for run in $(seq 1 "$RUNS"); do
  echo "run $run/$RUNS ..." >&2
  load "http://${ENDPOINTS[0]}/" --rate 1000 --duration "$DUR" --warmup 1s --json "$WORK/d.json"
  P50_DIRECT+=("$(jget "$WORK/d.json" 'r["latency_ms"]["p50"]')")
  for n in "${NAMES[@]}"; do
    url=http://127.0.0.1:${PORT[$n]}/
    load "$url" --clients 64 --duration 1s                      # warm-up
    c0=$(cpu_ns "${PID[$n]}")
    load "$url" --clients 64 --duration "$DUR" --json "$WORK/t.json"
    c1=$(cpu_ns "${PID[$n]}")
    all_ok "$n" "$WORK/t.json" throughput
    req=$(jget "$WORK/t.json" 'r["requests"]')
    THR[$n]+="$(jget "$WORK/t.json" 'r["throughput_rps"]') "
    CPU[$n]+="$(python3 -c "print(($c1 - $c0) / 1e3 / $req)") "     # µs per request
  done
  for n in "${NAMES[@]}"; do
    url=http://127.0.0.1:${PORT[$n]}/
    load "$url" --rate 1000 --duration 1s                       # warm-up
    c0=$(cpu_ns "${PID[$n]}")
    load "$url" --rate 1000 --duration "$DUR" --json "$WORK/p.json"
    c1=$(cpu_ns "${PID[$n]}")
    all_ok "$n" "$WORK/p.json" "1,000 requests/s"
    req=$(jget "$WORK/p.json" 'r["requests"]')
    P50[$n]+="$(jget "$WORK/p.json" 'r["latency_ms"]["p50"]') "
    CPU1K[$n]+="$(python3 -c "print(($c1 - $c0) / 1e3 / $req)") "
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
echo "proxy overhead: three endpoints (nginx, 1 process, behind a tailguard ingress) on 127.0.0.1; medians of $RUNS runs; $(nproc) cores shared by load, proxies and endpoints"
printf '%-14s %13s %11s %12s %10s %13s %10s\n' proxy "throughput/s" "CPU µs/req" "CPU µs@1k" "p50 ms@1k" "added p50 ms" "RSS MB@1k"
declare -A M_THR M_CPU M_CPU1K M_ADD M_RSS
for n in "${NAMES[@]}"; do
  M_THR[$n]=$(median ${THR[$n]}); M_CPU[$n]=$(median ${CPU[$n]}); M_CPU1K[$n]=$(median ${CPU1K[$n]})
  p=$(median ${P50[$n]}); M_ADD[$n]=$(python3 -c "print(round($p - $pd, 3))")
  M_RSS[$n]=$(python3 -c "print(round($(median ${RSS[$n]}) / 1024, 1))")
  printf '%-14s %13.0f %11.2f %12.2f %10.3f %13.3f %10.1f\n' "$n" "${M_THR[$n]}" "${M_CPU[$n]}" "${M_CPU1K[$n]}" "$p" "${M_ADD[$n]}" "${M_RSS[$n]}"
done
printf '%-14s %13s %11s %12s %10.3f\n' "direct (ingress)" - - - "$pd"
echo
for t in "${TGS[@]}"; do
  for peer in haproxy nginx; do
    python3 -c "print(f'$t/$peer: throughput {${M_THR[$t]}/${M_THR[$peer]}:.2f}x, CPU/request {${M_CPU[$t]}/${M_CPU[$peer]}:.2f}x, at 1k/s {${M_CPU1K[$t]}/${M_CPU1K[$peer]}:.2f}x, RSS {${M_RSS[$t]}/${M_RSS[$peer]}:.2f}x')"
  done
done
for t in "${TGS[@]}"; do
  case $t in tailguard-rr|tailguard-unprobed) continue ;; esac   # reference rows: the targets are the recommended policies'
  python3 - <<PY
thr = ${M_THR[$t]} / ${M_THR[haproxy]}
cpu = ${M_CPU[$t]} / ${M_CPU[haproxy]}
cpu1k = ${M_CPU1K[$t]} / ${M_CPU1K[haproxy]}
add = ${M_ADD[$t]}
rss = ${M_RSS[$t]}
def v(ok): return "met" if ok else "MISSED"
print()
print("$t (recommended policies):")
print(f"target throughput >= 1.0 x HAProxy:       {thr:.2f}x  {v(thr >= 1.0)}")
print(f"target CPU/request <= HAProxy's:          {cpu:.2f}x  {v(cpu <= 1.0)}")
print(f"target CPU/request at 1k/s <= HAProxy's:  {cpu1k:.2f}x  {v(cpu1k <= 1.0)}")
print(f"target added p50 <= 0.2 ms:               {add:.3f} ms  {v(add <= 0.2)}")
print(f"target RSS <= 20 MB at 1k conns:          {rss:.1f} MB  {v(rss <= 20)}")
PY
done
