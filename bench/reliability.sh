#!/usr/bin/env bash
# The reliability suite of issue #21: tailguard's proxy under slow clients, idle connections, an
# HTTP/2 fan-out to a hung upstream, replica faults (on 127.0.0.1 and in network namespaces), its
# own SIGTERM and config reloads. Every process is stopped by its PID; every phase is bounded in
# count and time; each runs RUNS times and its row shows the median (and the worst, or the total,
# where one bad run matters). Prints ONE table at the end: per row, the figure, its target and
# whether it was met.
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
#    replica through its own ingress sidecar, whose chips it needs. 200 req/s for 10 s, replica 1
#    faulted at 3 s (for bloc, its sidecar too). The upstream's policy is the balancer and every
#    other policy at its defaults: `outlier: {}`, `timeout: {kind: adaptive}`,
#    `retry: {max_attempts: 2}` (one retry, the default budget). Figures: failed requests %
#    (target <= 0.5 %) and the p99 of all requests.
#      faults  on 127.0.0.1: SIGKILL (connects refused) and SIGSTOP (connections hang)
#      netns   each replica in its own network namespace (tgrel0-2, 10.251.0.1-3 on a bridge; root
#              and iproute2, else the row says why it was skipped; removed on exit, error or
#              Ctrl-C): SIGKILL (the replica's kernel refuses, as a real host's would), and
#              blackhole: its link set down, so packets to it vanish and connects hang, which
#              127.0.0.1 cannot show (bounded by the proxy's connect_timeout, 2 s, and the
#              policy's timeout)
#    defaults: the same SIGKILL on 127.0.0.1 with the policy a user writes without `outlier:`
#             (ejection on by default): the balancer, `timeout: {kind: fixed, value: 100ms}`,
#             `retry: {max_attempts: 3, budget: 0.2}` (DEFAULTS_POLICY replaces it, e.g. with
#             `outlier: off` added). Target <= 0.5 % failed.
# 4. Proxy SIGTERM under load: 200 req/s to a 200 ms service (about 40 requests in flight), SIGTERM
#    at 2 s. Figure: requests cut mid-flight, i.e. that reached the proxy and got no whole answer
#    (load's io, timeout and 5xx errors; refused connects after the listener closed are not cuts,
#    and are shown apart), summed over the runs. Target 0.
# 5. Config reload under load: 200 req/s for 10 s while the file is rewritten every second (the
#    balancer and max_requests alternate). Figure: failed requests, summed over the runs. Target 0.
# 6. HTTP/2 fan-out: h2load (Debian's nghttp2-client) opens 105 h2c connections x 200 streams to
#    an egress route whose upstream accepts connections and never answers, for FANOUT_S (15 s).
#    Meanwhile other routes are asked once every 0.2 s: the egress's other upstream (nginx), the
#    ingress (to nginx) and admin /healthz; and the proxy's open descriptors are sampled
#    (/proc/PID/fd). Figures: other routes answered (all asked / answered) and the most fds.
#    Target: every one answered, fds under the bound of docs/security.md.
# Env: RUNS (3), N (2000), IDLE (10000), HOLD (8), FANOUT_S (15), BALANCERS (all six),
# PHASES (all: "slow idle faults defaults netns term reload fanout"; a subset runs only those).
# `ulimit -n` is raised to 65536 (the idle phase's 10,000 client sockets live in one process).
source "$(dirname "$0")/lib.sh"
RUNS=${RUNS:-3}; N=${N:-2000}; IDLE=${IDLE:-10000}; HOLD=${HOLD:-8}; FANOUT_S=${FANOUT_S:-15}
BALANCERS=${BALANCERS:-random round-robin least-request peak-ewma bloc prequal}
PHASES=" ${PHASES:-slow idle faults defaults netns term reload fanout} "
want() { [[ "$PHASES" == *" $1 "* ]]; }
START_S=$(date +%s)
build_tailguard; install_debian_peers
[ -x /usr/bin/h2load ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nghttp2-client >/dev/null; }
ulimit -n 65536 2>/dev/null || ulimit -n 16384

ROWS=()   # "phase|case|figure|target|met" lines of the final table
row() { ROWS+=("$1|$2|$3|$4|$5"); }
verdict() { python3 -c "import sys; print('met' if $1 else 'MISSED')"; }
# sample KEY VALUE: one run's figure; med/worst KEY: the median / the largest of KEY's runs
declare -A SAMPLES
sample() { SAMPLES[$1]+="$2 "; }
med() { median ${SAMPLES[$1]}; }
worst() { python3 -c 'import sys; print(max(float(x) for x in sys.argv[1:]))' ${SAMPLES[$1]}; }
total() { python3 -c 'import sys; print(int(sum(float(x) for x in sys.argv[1:])))' ${SAMPLES[$1]}; }
# load ARGS: `tailguard load`; a run where every request failed is a measurement here, not an error
load() { "$TG" load "$@" >"$WORK/load.out" 2>"$WORK/load.err" || grep -v '^results written' "$WORK/load.err" >&2 || true; }
# errors KIND: the count of one error kind in the last load's summary (0 if absent)
errors() { awk -v k="$1" '/^Errors/ { for (i = 1; i <= NF; i++) if (index($i, k ":") == 1) { split($i, a, ":"); s += a[2] } } END { print s + 0 }' "$WORK/load.out"; }
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# ---- 1 and 2: slow and idle clients ----
BACKEND=18180; P_TG=18181; P_HA=18182
declare -A PORT PID
start_front() {   # nginx, and tailguard and HAProxy in front of it
  nginx_static $BACKEND
  proxy_file "$WORK/tg.yaml" $P_TG $BACKEND
  start tg "$TG" proxy --config "$WORK/tg.yaml" --workers 1; PID[tailguard]=$LAST_PID
  haproxy_file "$WORK/haproxy.cfg" $P_HA $BACKEND
  start haproxy /usr/sbin/haproxy -db -f "$WORK/haproxy.cfg"; PID[haproxy]=$LAST_PID
  PORT=([tailguard]=$P_TG [haproxy]=$P_HA)
  for n in tailguard haproxy; do wait_port "${PORT[$n]}"; done
}
attack() {   # attack PROXY KIND CONNECTIONS: one measured attack, one sample of each figure
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
  sample "$n.$k.cpu" "$(python3 -c "print(($c1 - $c0) / $HZ / ($t1 - $t0) * 100)")"
  sample "$n.$k.p99" "$(jget "$WORK/a.json" "r['latency_ms']['p99'] / $unloaded if r['succeeded'] else float('inf')")"
  sample "$n.$k.ok" "$(jget "$WORK/a.json" 'r["success_rate"] * 100')"
  sample "$n.$k.rss" "$(python3 -c "print($after / $before)")"
}
attack_rows() {   # attack_rows PROXY KIND CONNECTIONS: the medians of its runs as one row
  local n=$1 k=$2 p99 rss cpu ok target=- met=-
  [ -n "${SAMPLES[$n.$k.p99]:-}" ] || return 0
  p99=$(med "$n.$k.p99"); rss=$(med "$n.$k.rss"); cpu=$(med "$n.$k.cpu"); ok=$(med "$n.$k.ok")
  if [ "$n" = tailguard ]; then
    target="p99 <= 2x, RSS 0.8-1.2"; met=$(verdict "float('$p99') <= 2 and abs($rss - 1) <= 0.2 and $ok == 100")
  fi
  row "$k x$3" "$n" "$(printf 'p99 %.2fx RSS %.2fx CPU %.1f%% ok %.1f%%' "$p99" "$rss" "$cpu" "$ok")" "$target" "$met"
}
if want slow || want idle; then
  start_front
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
    for k in header body preface; do attack_rows "$n" "$k" "$N"; done
    attack_rows "$n" idle "$IDLE"
  done
  for n in tailguard haproxy; do stop_pid "${PID[$n]}"; done
fi

# ---- 3: replica faults, on 127.0.0.1 and in network namespaces ----
R=(18191 18192 18193); ING=(18201 18202 18203); P_F=18190
# Where the replicas live: HOST[i] is replica i's address, IN_NS[i] the prefix that runs a
# command beside it (empty on loopback; `ip netns exec NS` in a namespace, which execs the
# command: the PID is the command's own).
HOST=(127.0.0.1 127.0.0.1 127.0.0.1); IN_NS=("" "" "")
# Network namespaces: tgrel0-2, replica i at 10.251.0.(i+1)/24 on a veth pair whose host end is on
# the bridge tgrelbr (10.251.0.254), as the lab's `--isolation netns` (crates/lab/src/netns.rs)
# lays them out, in a block the lab never picks (its slots are 10.2-250.x). The host holds a
# permanent neighbour entry per replica, so a replica whose link is down is a black hole (its
# packets vanish, connects hang, as a host gone behind a router), not an address ARP gives up on
# (which would refuse connects with EHOSTUNREACH after about 3 s).
NS_NET=10.251.0; NS_BRIDGE=tgrelbr
netns_down() {
  local i
  for i in 0 1 2; do ip netns del "tgrel$i" 2>/dev/null || true; done
  ip link del "$NS_BRIDGE" 2>/dev/null || true
}
# netns_up: creates them; on failure prints why on stderr, removes what it made, returns 1
netns_up() {
  local i mac
  [ "$(id -u)" = 0 ] || { echo "not root" >&2; return 1; }
  command -v ip >/dev/null || { echo "no ip command (apt-get install iproute2)" >&2; return 1; }
  netns_down   # what a run killed by SIGKILL left
  AT_EXIT+=(netns_down)
  {
    ip link add "$NS_BRIDGE" type bridge && ip addr add "$NS_NET.254/24" dev "$NS_BRIDGE" &&
      ip link set "$NS_BRIDGE" up
  } || { netns_down; return 1; }
  for i in 0 1 2; do
    {
      ip netns add "tgrel$i" && ip link add "tgrelh$i" type veth peer name "tgreln$i" &&
        ip link set "tgreln$i" netns "tgrel$i" && ip link set "tgrelh$i" master "$NS_BRIDGE" up &&
        ip -n "tgrel$i" addr add "$NS_NET.$((i + 1))/24" dev "tgreln$i" &&
        ip -n "tgrel$i" link set "tgreln$i" up && ip -n "tgrel$i" link set lo up &&
        mac=$(ip -n "tgrel$i" -o link show "tgreln$i" | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2) &&
        ip neigh replace "$NS_NET.$((i + 1))" lladdr "$mac" dev "$NS_BRIDGE" nud permanent
    } || { netns_down; return 1; }
  done
}
# Replica I: `tailguard serve`, and (for bloc, whose chips come from the callee's sidecar) its
# ingress sidecar with BLOC's dynamic admission; a fault hits both, as it would a whole pod.
start_replica() {
  local h=${HOST[$1]}
  start "serve$1" ${IN_NS[$1]} "$TG" serve bench/reliability.yaml --service backend --replica "$1" --listen "$h:${R[$1]}"
  RP[$1]=$LAST_PID
  printf 'ingress: {listen: "%s:%s", app: "%s:%s", admission: {kind: dynamic}}\nworkers: 1\n' "$h" "${ING[$1]}" "$h" "${R[$1]}" >"$WORK/ingress$1.yaml"
  start "ingress$1" ${IN_NS[$1]} "$TG" proxy --config "$WORK/ingress$1.yaml"
  IP[$1]=$LAST_PID
  wait_port "${R[$1]}" "$h"; wait_port "${ING[$1]}" "$h"
}
# fault_inject / fault_heal FAULT: to replica 1. KILL and STOP signal its processes; blackhole
# (namespaces only) sets its link down, so nothing it sends or is sent arrives.
fault_inject() {
  case $1 in
    KILL | STOP) kill -"$1" "${RP[1]}" "${IP[1]}" ;;
    blackhole) ip -n tgrel1 link set tgreln1 down ;;
  esac
}
fault_heal() {
  case $1 in
    KILL) wait "${RP[1]}" "${IP[1]}" 2>/dev/null || true; start_replica 1 ;;
    STOP) kill -CONT "${RP[1]}" "${IP[1]}" ;;
    blackhole) ip -n tgrel1 link set tgreln1 up ;;
  esac
}
# The upstream's policy beside its balancer in the fault phases, and in the defaults phase.
FAULT_POLICY='{outlier: {}, timeout: {kind: adaptive}, retry: {max_attempts: 2}}'
DEFAULTS_POLICY=${DEFAULTS_POLICY:-'{timeout: {kind: fixed, value: 100ms}, retry: {max_attempts: 3, budget: 0.2}}'}
# fault_run NET BALANCER FAULT [POLICY]: 200 req/s for 10 s through a fresh egress, FAULT at 3 s;
# one sample of the failed % and the p99
fault_run() {
  local net=$1 bal=$2 fault=$3 policy=${4:-$FAULT_POLICY} ports=("${R[@]}") pp lp fail p99 ejected
  [ "$bal" = bloc ] && ports=("${ING[@]}")
  cat >"$WORK/fault.yaml" <<CONF
egress:
  listen: 127.0.0.1:$P_F
  upstreams:
    backend:
      endpoints: ["${HOST[0]}:${ports[0]}", "${HOST[1]}:${ports[1]}", "${HOST[2]}:${ports[2]}"]
      policy: {balancer: {kind: $bal}, ${policy:1}
workers: 1
CONF
  start fault-proxy "$TG" proxy --config "$WORK/fault.yaml"; pp=$LAST_PID
  wait_port $P_F
  "$TG" load "http://127.0.0.1:$P_F/" --rate 200 --duration 10s --json "$WORK/f.json" >"$WORK/load.out" 2>&1 &
  lp=$!; PIDS+=("$lp")
  sleep 3; fault_inject "$fault"
  wait "$lp" || true
  fault_heal "$fault"
  stop_pid "$pp"
  fail=$(jget "$WORK/f.json" '(1 - r["success_rate"]) * 100')
  p99=$(jget "$WORK/f.json" 'r["latency_ms"]["p99"]')
  ejected=$(grep -c ejected "$WORK/fault-proxy.log" || true)
  echo "  $net $bal $fault: failed $fail %, p99 $p99 ms, $(grep '^Status' "$WORK/load.out" | tr -s ' '), ejections logged $ejected" >&2
  sample "$net.$bal.$fault.fail" "$fail"; sample "$net.$bal.$fault.p99" "$p99"
}
fault_row() {   # fault_row NET BALANCER FAULT CASE: the medians of its runs as one row
  local k=$1.$2.$3 fail
  fail=$(med "$k.fail")
  row "$4" "$2" "$(printf '%.2f %% failed (worst %.2f), p99 %.1f ms' "$fail" "$(worst "$k.fail")" "$(med "$k.p99")")" \
    "<= 0.5 %" "$(verdict "$fail <= 0.5")"
}
# faults NET POLICY FAULT...: every balancer against each FAULT, RUNS times, with the replicas
# where HOST and IN_NS put them
faults() {
  local net=$1 policy=$2 i run bal fault; shift 2
  for i in 0 1 2; do start_replica $i; done
  for run in $(seq 1 "$RUNS"); do
    echo "replica faults ($net), run $run/$RUNS ..." >&2
    for bal in $BALANCERS; do
      for fault in "$@"; do fault_run "$net" "$bal" "$fault" "$policy"; done
    done
  done
  for i in 0 1 2; do stop_pid "${RP[$i]}"; stop_pid "${IP[$i]}"; done
}
if want faults; then
  faults loopback "$FAULT_POLICY" KILL STOP
  for bal in $BALANCERS; do
    fault_row loopback "$bal" KILL "replica SIGKILL"; fault_row loopback "$bal" STOP "replica SIGSTOP"
  done
fi
if want defaults; then
  faults defaults "$DEFAULTS_POLICY" KILL
  for bal in $BALANCERS; do fault_row defaults "$bal" KILL "SIGKILL, no outlier:"; done
fi
if want netns; then
  if netns_up 2>"$WORK/netns.err"; then
    HOST=("$NS_NET.1" "$NS_NET.2" "$NS_NET.3"); IN_NS=("ip netns exec tgrel0" "ip netns exec tgrel1" "ip netns exec tgrel2")
    faults netns "$FAULT_POLICY" KILL blackhole
    for bal in $BALANCERS; do
      fault_row netns "$bal" KILL "netns SIGKILL"; fault_row netns "$bal" blackhole "netns blackhole"
    done
    netns_down
  else
    row "netns faults" "skipped" "$(head -1 "$WORK/netns.err")" "-" "-"
  fi
fi

# ---- 4: proxy SIGTERM under load ----
SLOW=18194; P_T=18195
term_run() {   # one SIGTERM: a sample of the requests cut and of the connects refused after
  local pp lp
  proxy_file "$WORK/term.yaml" $P_T $SLOW
  start term-proxy "$TG" proxy --config "$WORK/term.yaml" --workers 1; pp=$LAST_PID
  wait_port $P_T
  "$TG" load "http://127.0.0.1:$P_T/" --rate 200 --duration 4s --json "$WORK/t.json" >"$WORK/load.out" 2>&1 &
  lp=$!; PIDS+=("$lp")
  sleep 2; kill -TERM "$pp"
  wait "$lp" || true; wait "$pp" 2>/dev/null || true
  echo "  SIGTERM: $(grep -E '^(Status|Errors)' "$WORK/load.out" | tr -s ' ' | tr '\n' ' ')" >&2
  sample term.cut $(($(errors io) + $(errors timeout) + $(errors 5xx)))
  sample term.refused "$(errors connect)"
}
term_row() {
  row "proxy SIGTERM" "200 ms service" "$(total term.cut) cut in $RUNS runs ($(printf %.0f "$(med term.refused)") refused after close)" \
    "0 cut" "$(verdict "$(total term.cut) == 0")"
}

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
reload_run() {   # one run of reloads: a sample of the requests failed and of the reloads
  local pp lp i
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
  sample reload.count "$(grep -c "reloaded" "$WORK/reload-proxy.log" || true)"
  sample reload.failed "$(jget "$WORK/r.json" 'r["requests"] - r["succeeded"]')"
  echo "  reload: $(grep '^Status' "$WORK/load.out")" >&2
}
reload_row() {
  local least
  least=$(python3 -c 'import sys; print(int(min(float(x) for x in sys.argv[1:])))' ${SAMPLES[reload.count]})
  row "config reload" "$least+ reloads in 10 s" "$(total reload.failed) failed in $RUNS runs" "0" \
    "$(verdict "$(total reload.failed) == 0 and $least >= 5")"
}
if want term || want reload; then
  start slow "$TG" serve bench/reliability.yaml --service slow --listen "127.0.0.1:$SLOW"; PID_SLOW=$LAST_PID
  wait_port $SLOW
  for run in $(seq 1 "$RUNS"); do
    echo "SIGTERM and reload, run $run/$RUNS ..." >&2
    if want term; then term_run; fi
    if want reload; then reload_run; fi
  done
  if want term; then term_row; fi
  if want reload; then reload_row; fi
  stop_pid "$PID_SLOW"
fi

# ---- 6: HTTP/2 fan-out to a hung upstream ----
HUNG=18197; P_E=18198; P_I=18199; P_A=18200
fds() { ls "/proc/$1/fd" | wc -l; }
fanout_run() {   # one fan-out: samples of the other routes asked and answered and of the fds
  local pp hp hungp asked=0 answered=0 fd_before max_fds end url code f refused
  python3 bench/hung.py $HUNG "$((FANOUT_S + 10))" >"$WORK/hung.log" 2>&1 &
  hungp=$!; PIDS+=("$hungp"); wait_port $HUNG
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
  fd_before=$(fds "$pp"); max_fds=$fd_before
  h2load -c 105 -m 200 -n 21000 -T "${FANOUT_S}s" "http://127.0.0.1:$P_E/hung" >"$WORK/h2load.out" 2>&1 &
  hp=$!; PIDS+=("$hp")
  end=$(($(date +%s) + FANOUT_S))
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
  sample fan.refused "${refused:-0}"
  stop_pid "$pp"; stop_pid "$hungp"
  sample fan.asked $asked; sample fan.answered $answered; sample fan.fds "$max_fds"; sample fan.before "$fd_before"
}
# the bound of docs/security.md for this file: the descriptors before (listeners and the runtime's)
# + the client connections (105 here) + the hung endpoint's connections (<= its upstream's
# max_requests and max_connections_per_endpoint, 1024) + the other routes' few (16 allowed)
fanout_rows() {
  local before most bound
  before=$(worst fan.before); most=$(worst fan.fds)
  bound=$(python3 -c "print(int($before) + 105 + 1024 + 16)")
  row "h2 fan-out 105x200" "other routes" "$(total fan.answered)/$(total fan.asked) answered in $RUNS runs" "all" \
    "$(verdict "$(total fan.answered) == $(total fan.asked)")"
  row "h2 fan-out 105x200" "proxy fds" "$(printf 'max %.0f (before %.0f; %.0f 503s median)' "$most" "$before" "$(med fan.refused)")" \
    "<= $bound" "$(verdict "$most <= $bound")"
}
if want fanout; then
  [ -n "${PID[tailguard]:-}" ] || nginx_static $BACKEND
  for run in $(seq 1 "$RUNS"); do
    echo "h2 fan-out, run $run/$RUNS ..." >&2
    fanout_run
  done
  fanout_rows
fi

echo
echo "reliability suite: RUNS=$RUNS (medians; 'worst' and totals over the runs), N=$N, IDLE=$IDLE, HOLD=${HOLD}s;" \
  "$(nproc) cores shared; $(($(date +%s) - START_S)) s"
printf '%-20s %-22s %-50s %-24s %s\n' phase case figure target met
for r in "${ROWS[@]}"; do
  IFS='|' read -r a b c d e <<<"$r"
  printf '%-20s %-22s %-50s %-24s %s\n' "$a" "$b" "$c" "$d" "$e"
done
