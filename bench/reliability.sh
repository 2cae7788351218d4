#!/usr/bin/env bash
# Reliability under slow-client attacks (issue #21): tailguard's proxy against HAProxy, one worker
# each, in front of the same backend (a single-process nginx), all on 127.0.0.1.
# For each attack kind (bench/slowloris.py: header, body, preface), N connections (2,000) are held
# open for HOLD (8 s, under the proxies' 10 s header and body read timeouts) while normal requests
# run at 200 req/s through the same proxy. Per proxy and kind, medians of RUNS runs:
#   CPU %      : the proxy's utime+stime (/proc/PID/stat) over the hold / the hold's length
#   p99 ratio  : normal requests' p99 during the attack / p99 unloaded (measured in the same run)
#   RSS after  : VmRSS 3 s after the attackers closed / VmRSS before the attack
# Targets (issue #21): p99 ratio <= 2 and RSS after within 20 % of before, for every kind.
# Env: RUNS (3), N (2000), HOLD (8).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}; N=${N:-2000}; HOLD=${HOLD:-8}
build_tailguard; install_debian_peers
ulimit -n 16384 2>/dev/null || true

BACKEND=18180; P_TG=18181; P_HA=18182
nginx_static $BACKEND
proxy_file "$WORK/tg.yaml" $P_TG $BACKEND
start tg "$TG" proxy --config "$WORK/tg.yaml" --workers 1; PID_TG=$LAST_PID
haproxy_file "$WORK/haproxy.cfg" $P_HA $BACKEND
start haproxy /usr/sbin/haproxy -db -f "$WORK/haproxy.cfg"; PID_HA=$LAST_PID
declare -A PORT=([tailguard]=$P_TG [haproxy]=$P_HA) PID=([tailguard]=$PID_TG [haproxy]=$PID_HA)
NAMES=(tailguard haproxy); KINDS=(header body preface)
for n in "${NAMES[@]}"; do wait_port "${PORT[$n]}"; done

load() { "$TG" load "$@" >/dev/null 2>"$WORK/load.err" || { cat "$WORK/load.err" >&2; return 1; }; }
declare -A CPU P99 RSS
for run in $(seq 1 "$RUNS"); do
  echo "run $run/$RUNS ..." >&2
  for n in "${NAMES[@]}"; do
    url=http://127.0.0.1:${PORT[$n]}/
    load "$url" --rate 200 --duration "${HOLD}s" --warmup 1s --json "$WORK/u.json"
    unloaded=$(jget "$WORK/u.json" 'r["latency_ms"]["p99"]')
    for k in "${KINDS[@]}"; do
      before=$(rss_kb "${PID[$n]}")
      rm -f "$WORK/slow.out"
      python3 bench/slowloris.py "${PORT[$n]}" "$N" "$HOLD" "$k" >"$WORK/slow.out" 2>&1 &
      sp=$!; PIDS+=("$sp")
      for _ in $(seq 1 300); do [ -f "$WORK/slow.out" ] && grep -q "^open" "$WORK/slow.out" && break; sleep 0.1; done
      grep -q '^open' "$WORK/slow.out" || { cat "$WORK/slow.out" >&2; exit 1; }
      c0=$(cpu_ticks "${PID[$n]}"); t0=$(date +%s.%N)
      load "$url" --rate 200 --duration "$((HOLD - 2))s" --warmup 1s --json "$WORK/a.json"
      wait "$sp" || { cat "$WORK/slow.out" >&2; exit 1; }
      c1=$(cpu_ticks "${PID[$n]}"); t1=$(date +%s.%N)
      sleep 3
      after=$(rss_kb "${PID[$n]}")
      CPU[$n.$k]+="$(python3 -c "print(($c1 - $c0) / $HZ / ($t1 - $t0) * 100)") "
      P99[$n.$k]+="$(python3 -c "print($(jget "$WORK/a.json" 'r["latency_ms"]["p99"]') / $unloaded)") "
      RSS[$n.$k]+="$(python3 -c "print($after / $before)") "
    done
  done
done

echo
echo "slow-client attacks: $N connections held ${HOLD} s per kind, normal load 200 req/s; medians of $RUNS runs; $(nproc) cores shared"
printf '%-10s %-8s %8s %12s %14s\n' proxy attack "CPU %" "p99 ratio" "RSS after/before"
for n in "${NAMES[@]}"; do
  for k in "${KINDS[@]}"; do
    printf '%-10s %-8s %8.1f %12.2f %14.2f\n' "$n" "$k" "$(median ${CPU[$n.$k]})" "$(median ${P99[$n.$k]})" "$(median ${RSS[$n.$k]})"
  done
done
echo
for k in "${KINDS[@]}"; do
  python3 - <<PY
p99, rss = $(median ${P99[tailguard.$k]}), $(median ${RSS[tailguard.$k]})
def v(ok): return "met" if ok else "MISSED"
print(f"tailguard, $k: target p99 ratio <= 2: {p99:.2f}  {v(p99 <= 2)};  RSS within 20 %: {rss:.2f}  {v(abs(rss - 1) <= 0.2)}")
PY
done
