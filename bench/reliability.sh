#!/usr/bin/env bash
# The reliability suite of issue #21: tailguard's proxy under slow clients, idle connections, an
# HTTP/2 fan-out to a hung upstream, replica faults, its own SIGTERM and config reloads. Everything
# on 127.0.0.1; every process is stopped by its PID; every phase is bounded in count and time.
# Prints ONE table at the end: per row, the figure, its target and whether it was met.
#
# 1. Slow clients (bench/slowloris.py: header, body, preface), tailguard against HAProxy, one
#    worker each, in front of the same single-process nginx. N connections (2,000) held for HOLD
#    (8 s, under the 10 s header and body read timeouts) while normal requests run at 200 req/s.
#      CPU %      the proxy's utime+stime (/proc/PID/stat) over the hold / the hold's length
#      p99 ratio  normal requests' p99 during the attack / p99 unloaded (same run)
#      RSS ratio  VmRSS 3 s after the attackers closed / VmRSS before the attack
#      ok         normal requests answered with success during the attack, %
#    Targets: p99 ratio <= 2, RSS within 20 % of before, every normal request answered
#    (tailguard's rows).
# 2. Idle connections: IDLE (10,000) connections opened to tailguard's egress and left silent for
#    HOLD, the same figures (a connect the kernel's backlog cannot take times out and is counted).
# 3. Replica faults: three `tailguard serve` replicas (bench/reliability.yaml, 2 ms each) behind
#    tailguard's egress, for every balancer the proxy offers (BALANCERS); bloc reaches each
#    replica through its own ingress sidecar, whose chips it needs. 200 req/s for 10 s, one
#    replica SIGKILLed (or SIGSTOPped) at 3 s (for bloc, its sidecar too). The upstream's policy is the balancer and every other policy
#    at its defaults: `outlier: {}`, `timeout: {kind: adaptive}`, `retry: {max_attempts: 2}` (one
#    retry, the default budget). Figure: failed requests %. Target <= 0.5 %.
# 4. Proxy SIGTERM under load: 200 req/s to a 200 ms service (about 40 requests in flight), SIGTERM
#    at 2 s. Figure: requests cut mid-flight, i.e. that reached the proxy and got no whole answer
#    (load's io, timeout and 5xx errors; refused connects after the listener closed are not cuts,
#    and are shown apart). Target 0.
# 5. Config reload under load: 200 req/s for 10 s while the file is rewritten every second (the
#    balancer and max_requests alternate). Figure: failed requests. Target 0.
# 6. HTTP/2 fan-out: h2load (Debian's nghttp2-client) opens 105 h2c connections x 200 streams to
#    an egress route whose upstream accepts connections and never answers, for FANOUT_S (15 s).
#    Meanwhile other routes are asked once every 0.2 s: the egress's other upstream (nginx), the
#    ingress (to nginx) and admin /healthz; and the proxy's open descriptors are sampled
#    (/proc/PID/fd). Figures: other routes answered (all asked / answered) and the most fds.
#    Target: every one answered, fds under the bound of docs/security.md.
# Env: RUNS (3; slow-client and idle medians), N (2000), IDLE (10000), HOLD (8), FANOUT_S (15),
# BALANCERS (all six),
# PHASES (all: "slow idle faults term reload fanout"; a subset runs only those).
# `ulimit -n` is raised to 65536 (the idle phase's 10,000 client sockets live in one process).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}; N=${N:-2000}; IDLE=${IDLE:-10000}; HOLD=${HOLD:-8}; FANOUT_S=${FANOUT_S:-15}
PHASES=" ${PHASES:-slow idle faults term reload fanout} "
want() { [[ "$PHASES" == *" $1 "* ]]; }
build_tailguard; install_debian_peers
[ -x /usr/bin/h2load ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client >/dev/null; }
ulimit -n 65536 2>/dev/null || ulimit -n 16384

ROWS=()   # "phase|case|figure|target|met" lines of the final table
row() { ROWS+=("$1|$2|$3|$4|$5"); }
verdict() { python3 -c "import sys; print('met' if $1 else 'MISSED')"; }
# load ARGS: `tailguard load`; a run where every request failed is a measurement here, not an error
load() { "$TG" load "$@" >"$WORK/load.out" 2>"$WORK/load.err" || grep -v '^results written' "$WORK/load.err" >&2 || true; }
# errors KIND: the count of one error kind in the last load's summary (0 if absent)
errors() { awk -v k="$1" '/^Errors/ { for (i = 1; i <= NF; i++) if (index($i, k ":") == 1) { split($i, a, ":"); s += a[2] } } END { print s + 0 }' "$WORK/load.out"; }
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# ---- 1 and 2: slow and idle clients ----
BACKEND=18180; P_TG=18181; P_HA=18182
nginx_static $BACKEND
proxy_file "$WORK/tg.yaml" $P_TG $BACKEND
start tg "$TG" proxy --config "$WORK/tg.yaml" --workers 1; PID_TG=$LAST_PID
haproxy_file "$WORK/haproxy.cfg" $P_HA $BACKEND
start haproxy /usr/sbin/haproxy -db -f "$WORK/haproxy.cfg"; PID_HA=$LAST_PID
declare -A PORT=([tailguard]=$P_TG [haproxy]=$P_HA) PID=([tailguard]=$PID_TG [haproxy]=$PID_HA)
for n in tailguard haproxy; do wait_port "${PORT[$n]}"; done

declare -A CPU P99 RSS OK
attack() {   # attack PROXY KIND CONNECTIONS: one measured attack, appended to CPU/P99/RSS
  local n=$1 k=$2 conns=$3 url=http://127.0.0.1:${PORT[$1]}/ unloaded before after sp c0 c1 t0 t1
  load "$url" --rate 200 --duration "${HOLD}s" --warmup 1s --json "$WORK/u.json"
  unloaded=$(jget "$WORK/u.json" 'r["latency_ms"]["p99"]')
  before=$(rss_kb "${PID[$n]}")
  rm -f "$WORK/slow.out"
  python3 bench/slowloris.py "${PORT[$n]}" "$conns" "$HOLD" "$k" >"$WORK/slow.out" 2>&1 &
  sp=$!; PIDS+=("$sp")
  for _ in $(seq 1 1200); do grep -q "^open" "$WORK/slow.out" 2>/dev/null && break; sleep 0.1; done
  grep -q '^open' "$WORK/slow.out" || { cat "$WORK/slow.out" >&2; exit 1; }
  c0=$(cpu_ticks "${PID[$n]}"); t0=$(date +%s.%N)
  load "$url" --rate 200 --duration "$((HOLD - 2))s" --warmup 1s --json "$WORK/a.json"
  wait "$sp" || { cat "$WORK/slow.out" >&2; exit 1; }
  c1=$(cpu_ticks "${PID[$n]}"); t1=$(date +%s.%N)
  sleep 3
  after=$(rss_kb "${PID[$n]}")
  echo "  $n $k: $(head -1 "$WORK/slow.out"), success $(jget "$WORK/a.json" 'r["success_rate"]')" >&2
  CPU[$n.$k]+="$(python3 -c "print(($c1 - $c0) / $HZ / ($t1 - $t0) * 100)") "
  P99[$n.$k]+="$(jget "$WORK/a.json" "r['latency_ms']['p99'] / $unloaded if r['succeeded'] else float('inf')") "
  OK[$n.$k]+="$(jget "$WORK/a.json" 'r["success_rate"] * 100') "
  RSS[$n.$k]+="$(python3 -c "print($after / $before)") "
}
for run in $(seq 1 "$RUNS"); do
  echo "slow and idle clients, run $run/$RUNS ..." >&2
  if want slow; then
    for n in tailguard haproxy; do
      for k in header body preface; do attack "$n" "$k" "$N"; done
    done
  fi
  if want idle; then attack tailguard idle "$IDLE"; fi
done
for n in tailguard haproxy; do
  for k in header body preface idle; do
    [ -n "${P99[$n.$k]:-}" ] || continue
    conns=$N; [ "$k" = idle ] && conns=$IDLE
    p99=$(median ${P99[$n.$k]}); rss=$(median ${RSS[$n.$k]}); cpu=$(median ${CPU[$n.$k]}); ok=$(median ${OK[$n.$k]})
    target=-; met=-
    if [ "$n" = tailguard ]; then
      target="p99 <= 2x, RSS 0.8-1.2"; met=$(verdict "float('$p99') <= 2 and abs($rss - 1) <= 0.2 and $ok == 100")
    fi
    row "$k x$conns" "$n" "$(printf 'p99 %.2fx RSS %.2fx CPU %.1f%% ok %.1f%%' "$p99" "$rss" "$cpu" "$ok")" "$target" "$met"
  done
done
for p in "$PID_TG" "$PID_HA"; do stop_pid "$p"; done

# ---- 3: replica SIGKILL and SIGSTOP per balancer ----
if want faults; then
R=(18191 18192 18193); ING=(18201 18202 18203); P_F=18190
# Replica I: `tailguard serve`, and (for bloc, whose chips come from the callee's sidecar) its
# ingress sidecar with BLOC's dynamic admission; a fault hits both, as it would a whole pod.
start_replica() {
  start "serve$1" "$TG" serve bench/reliability.yaml --service backend --replica "$1" --listen "127.0.0.1:${R[$1]}"
  RP[$1]=$LAST_PID
  printf 'ingress: {listen: 127.0.0.1:%s, app: 127.0.0.1:%s, admission: {kind: dynamic}}\nworkers: 1\n' "${ING[$1]}" "${R[$1]}" >"$WORK/ingress$1.yaml"
  start "ingress$1" "$TG" proxy --config "$WORK/ingress$1.yaml"
  IP[$1]=$LAST_PID
  wait_port "${R[$1]}"; wait_port "${ING[$1]}"
}
for i in 0 1 2; do start_replica $i; done
for bal in ${BALANCERS:-random round-robin least-request peak-ewma bloc prequal}; do
  ports=("${R[@]}"); [ "$bal" = bloc ] && ports=("${ING[@]}")
  for sig in KILL STOP; do
    cat >"$WORK/fault.yaml" <<CONF
egress:
  listen: 127.0.0.1:$P_F
  upstreams:
    backend:
      endpoints: [127.0.0.1:${ports[0]}, 127.0.0.1:${ports[1]}, 127.0.0.1:${ports[2]}]
      policy:
        balancer: {kind: $bal}
        outlier: {}
        timeout: {kind: adaptive}
        retry: {max_attempts: 2}
workers: 1
CONF
    start fault-proxy "$TG" proxy --config "$WORK/fault.yaml"; pp=$LAST_PID
    wait_port $P_F
    "$TG" load "http://127.0.0.1:$P_F/" --rate 200 --duration 10s --json "$WORK/f.json" >"$WORK/load.out" 2>&1 &
    lp=$!; PIDS+=("$lp")
    sleep 3; kill -"$sig" "${RP[1]}" "${IP[1]}"
    wait "$lp" || true
    if [ "$sig" = STOP ]; then
      kill -CONT "${RP[1]}" "${IP[1]}"
    else
      wait "${RP[1]}" "${IP[1]}" 2>/dev/null || true; start_replica 1
    fi
    stop_pid "$pp"
    fail=$(jget "$WORK/f.json" '(1 - r["success_rate"]) * 100')
    ejected=$(grep -c ejected "$WORK/fault-proxy.log" || true)
    echo "  $bal SIG$sig: failed $fail %, $(grep '^Status' "$WORK/load.out" | tr -s ' '), ejections logged $ejected" >&2
    row "replica SIG$sig" "$bal" "$(printf '%.2f %% failed' "$fail")" "<= 0.5 %" "$(verdict "$fail <= 0.5")"
  done
done
for i in 0 1 2; do stop_pid "${RP[$i]}"; stop_pid "${IP[$i]}"; done
fi

# ---- 4: proxy SIGTERM under load ----
SLOW=18194; P_T=18195
if want term || want reload; then
  start slow "$TG" serve bench/reliability.yaml --service slow --listen "127.0.0.1:$SLOW"; PID_SLOW=$LAST_PID
  wait_port $SLOW
fi
if want term; then
proxy_file "$WORK/term.yaml" $P_T $SLOW
start term-proxy "$TG" proxy --config "$WORK/term.yaml" --workers 1; pp=$LAST_PID
wait_port $P_T
"$TG" load "http://127.0.0.1:$P_T/" --rate 200 --duration 4s --json "$WORK/t.json" >"$WORK/load.out" 2>&1 &
lp=$!; PIDS+=("$lp")
sleep 2; kill -TERM "$pp"
wait "$lp" || true; wait "$pp" 2>/dev/null || true
cut=$(( $(errors io) + $(errors timeout) + $(errors 5xx) )); refused=$(errors connect)
echo "  SIGTERM: $(grep -E '^(Status|Errors)' "$WORK/load.out" | tr -s ' ' | tr '\n' ' ')" >&2
row "proxy SIGTERM" "200 ms service" "$cut cut ($refused refused after close)" "0 cut" "$(verdict "$cut == 0")"
fi

# ---- 5: config reload under load ----
P_R=18196
reload_file() {   # reload_file BALANCER MAX_REQUESTS
  cat >"$WORK/reload.yaml.new" <<CONF
egress:
  listen: 127.0.0.1:$P_R
  max_requests: $2
  upstreams:
    backend:
      endpoints: [127.0.0.1:$SLOW]
      policy: {balancer: {kind: $1}}
workers: 1
CONF
  mv "$WORK/reload.yaml.new" "$WORK/reload.yaml"
}
if want reload; then
reload_file round-robin 1024
start reload-proxy "$TG" proxy --config "$WORK/reload.yaml"; pp=$LAST_PID
wait_port $P_R
"$TG" load "http://127.0.0.1:$P_R/" --rate 200 --duration 10s --json "$WORK/r.json" >"$WORK/load.out" 2>&1 &
lp=$!; PIDS+=("$lp")
for i in $(seq 1 9); do
  sleep 1
  if [ $((i % 2)) = 1 ]; then reload_file least-request 1000; else reload_file round-robin 1024; fi
done
wait "$lp" || true
sleep 1; stop_pid "$pp"
reloads=$(grep -c "reloaded" "$WORK/reload-proxy.log" || true)
failed=$(jget "$WORK/r.json" 'r["requests"] - r["succeeded"]')
echo "  reload: $reloads reloads, $(grep '^Status' "$WORK/load.out")" >&2
row "config reload" "$reloads reloads in 10 s" "$failed failed" "0" "$(verdict "$failed == 0 and $reloads >= 5")"
fi
if want term || want reload; then stop_pid "$PID_SLOW"; fi

# ---- 6: HTTP/2 fan-out to a hung upstream ----
if want fanout; then
HUNG=18197; P_E=18198; P_I=18199; P_A=18200
python3 bench/hung.py $HUNG "$((FANOUT_S + 10))" >"$WORK/hung.log" 2>&1 &
PIDS+=("$!"); wait_port $HUNG
cat >"$WORK/fan.yaml" <<CONF
egress:
  listen: 127.0.0.1:$P_E
  upstreams:
    hung: {endpoints: [127.0.0.1:$HUNG], match: {path_prefix: /hung}}
    backend: {endpoints: [127.0.0.1:$BACKEND]}
ingress:
  listen: 127.0.0.1:$P_I
  app: 127.0.0.1:$BACKEND
admin:
  listen: 127.0.0.1:$P_A
workers: 1
CONF
start fan-proxy "$TG" proxy --config "$WORK/fan.yaml"; pp=$LAST_PID
for p in $P_E $P_I $P_A; do wait_port $p; done
fds() { ls "/proc/$1/fd" | wc -l; }
fd_before=$(fds "$pp")
h2load -c 105 -m 200 -n 21000 -T "${FANOUT_S}s" "http://127.0.0.1:$P_E/hung" >"$WORK/h2load.out" 2>&1 &
hp=$!; PIDS+=("$hp")
asked=0; answered=0; max_fds=$fd_before
end=$(( $(date +%s) + FANOUT_S ))
while [ "$(date +%s)" -lt "$end" ]; do
  for url in "http://127.0.0.1:$P_E/" "http://127.0.0.1:$P_I/" "http://127.0.0.1:$P_A/healthz"; do
    asked=$((asked + 1))
    code=$(curl -s -o /dev/null -m 1 -w '%{http_code}' "$url" || true)
    [ "$code" = 200 ] && answered=$((answered + 1))
  done
  f=$(fds "$pp"); [ "$f" -gt "$max_fds" ] && max_fds=$f
  sleep 0.2
done
wait "$hp" || true
echo "  h2 fan-out: $(grep -E '^requests:|^status codes:' "$WORK/h2load.out" | tr '\n' ' ')" >&2
refused=$(curl -s "http://127.0.0.1:$P_A/metrics" | awk '/^tailguard_egress_upstream_refused_total\{upstream="hung"\}/ { print $2 }')
stop_pid "$pp"
# the bound of docs/security.md for this file: the descriptors before (listeners and the runtime's)
# + the client connections (105 here) + the hung endpoint's connections (<= its upstream's
# max_requests and max_connections_per_endpoint, 1024) + the other routes' few (16 allowed)
BOUND=$((fd_before + 105 + 1024 + 16))
row "h2 fan-out 105x200" "other routes" "$answered/$asked answered" "all" "$(verdict "$answered == $asked")"
row "h2 fan-out 105x200" "proxy fds" "max $max_fds (before $fd_before; $refused 503s)" "<= $BOUND" "$(verdict "$max_fds <= $BOUND")"
fi

echo
echo "reliability suite: RUNS=$RUNS (slow/idle medians), N=$N, IDLE=$IDLE, HOLD=${HOLD}s; $(nproc) cores shared"
printf '%-20s %-22s %-44s %-24s %s\n' phase case figure target met
for r in "${ROWS[@]}"; do
  IFS='|' read -r a b c d e <<<"$r"
  printf '%-20s %-22s %-44s %-24s %s\n' "$a" "$b" "$c" "$d" "$e"
done
