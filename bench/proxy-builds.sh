#!/usr/bin/env bash
# CPU per request of tailguard egress builds against HAProxy and nginx as users deploy them,
# measured interleaved round by round, so that every build and peer see the same moments of a noisy
# machine: the A/B measure for changes to the proxy's cost.
#   bench/proxy-builds.sh [BINARY...]   # e.g. copies of target/release/tailguard from two commits;
#                                       # none: target/release/tailguard (built)
# The set-up is bench/proxy-overhead.sh's: three endpoints, each a single-process nginx behind a
# tailguard ingress sidecar (the INGRESS_BIN build, default the load generator's), and in front of
# them each BINARY with each of POLICIES (lib.sh's policy_yaml: `recommended` and `round-robin` by
# default), HAProxy (`balance leastconn` with its retry and `observe layer7` options) and nginx
# (`least_conn`, `proxy_next_upstream`), one worker each. Each round, per proxy and load in LOADS:
#   closed : 64 closed-loop clients for DUR (4 s) after a 1 s warm-up
#   rate   : an open loop of 1,000 requests/s for DUR after a 1 s warm-up
# time on a CPU from /proc/PID/task/*/schedstat, split into user and system time in the proportion
# of /proc/PID/stat's clock ticks. Prints, per load, the medians over ROUNDS (6) and each
# row's ratios to HAProxy (CPU ×, and thr × for the closed loop).
# Env: ROUNDS (6), DUR (4), POLICIES ("recommended round-robin"), LOADS ("closed rate"), PEERS
# ("haproxy nginx").
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-6}; DUR=${DUR:-4}
POLICIES=${POLICIES:-recommended round-robin}; LOADS=${LOADS:-closed rate}; PEERS=${PEERS:-haproxy nginx}
if [ $# -eq 0 ]; then build_tailguard; set -- "$TG"; fi
[ -x "$TG" ] || build_tailguard   # the load generator and the ingresses
for b in "$@"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }; done
install_debian_peers

sidecar_endpoints 18300
PORT=18381
NAMES=(); declare -A AT PROC
for i in $(seq 1 $#); do
  for policy in $POLICIES; do
    name="$i:$(basename "${!i}") $policy"; NAMES+=("$name")
    egress_file "$WORK/tg$PORT.yaml" $PORT "$policy"
    start "tg$PORT" "${!i}" proxy --config "$WORK/tg$PORT.yaml" --workers 1
    AT[$name]=$PORT; PROC[$name]=$LAST_PID; PORT=$((PORT + 1))
  done
done
for peer in $PEERS; do
  case $peer in
    haproxy) deployed_haproxy "$WORK/haproxy.cfg" $PORT; start haproxy /usr/sbin/haproxy -db -f "$WORK/haproxy.cfg" ;;
    nginx) deployed_nginx "$WORK/nxp" $PORT ;;
    *) echo "unknown peer $peer" >&2; exit 2 ;;
  esac
  NAMES+=("$peer"); AT[$peer]=$PORT; PROC[$peer]=$LAST_PID; PORT=$((PORT + 1))
done
for n in "${NAMES[@]}"; do wait_port "${AT[$n]}"; done

times() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
: >"$WORK/rounds"
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS ..." >&2
  for load in $LOADS; do
    case $load in
      closed) how=(--clients 64) ;;
      rate) how=(--rate 1000) ;;
      *) echo "unknown load $load (closed, rate)" >&2; exit 2 ;;
    esac
    for n in "${NAMES[@]}"; do
      url=http://127.0.0.1:${AT[$n]}/
      "$TG" load "$url" "${how[@]}" --duration 1s >/dev/null 2>&1
      read -r u0 s0 < <(times "${PROC[$n]}"); c0=$(cpu_ns "${PROC[$n]}")
      "$TG" load "$url" "${how[@]}" --duration "${DUR}s" --json "$WORK/t.json" >/dev/null 2>"$WORK/load.err" ||
        { cat "$WORK/load.err" >&2; exit 1; }
      read -r u1 s1 < <(times "${PROC[$n]}"); c1=$(cpu_ns "${PROC[$n]}")
      echo "$load|$n|$(jget "$WORK/t.json" 'r["requests"]')|$(jget "$WORK/t.json" 'r["succeeded"]')|$((u1 - u0))|$((s1 - s0))|$((c1 - c0))" >>"$WORK/rounds"
    done
  done
done
python3 - "$WORK/rounds" "$DUR" "$PEERS" "${NAMES[@]}" <<'PY'
import statistics, sys
path, dur, peers, names = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
rows = {}
for line in open(path):
    load, n, req, ok, u, s, ns = line.rstrip("\n").split("|")
    req, u, s = int(req), int(u), int(s)
    if int(ok) != req:
        print(f"warning: {n} ({load}): {req - int(ok)} of {req} failed", file=sys.stderr)
    total = int(ns) / 1e3 / req
    user = total * u / (u + s) if u + s else total / 2
    rows.setdefault(load, {}).setdefault(n, []).append((req / dur, user, total - user))
ref = "haproxy" if "haproxy" in peers else None
for load, by_name in rows.items():
    what = "64 closed-loop clients" if load == "closed" else "1,000 requests/s"
    rounds = len(next(iter(by_name.values())))
    print(f"\nproxy builds, interleaved; {what}, {dur:g} s; medians of {rounds} rounds")
    print(f"{'proxy':<36}{'req/s':>9}{'user µs':>9}{'sys µs':>9}{'total':>9}{'CPU ×':>8}{'thr ×':>8}")
    med = {n: [statistics.median(r[i] for r in by_name[n]) for i in range(3)] for n in names}
    for n in names:
        rps, u, s = med[n]
        if ref:
            ha_rps, ha_u, ha_s = med[ref]
            ratios = f"{(u + s) / (ha_u + ha_s):>8.2f}" + (f"{rps / ha_rps:>8.2f}" if load == "closed" else f"{'':>8}")
        else:
            ratios = ""
        print(f"{n:<36}{rps:>9.0f}{u:>9.2f}{s:>9.2f}{u + s:>9.2f}{ratios}")
PY
