#!/usr/bin/env bash
# CPU per request of tailguard proxy builds against HAProxy, measured interleaved round by round, so
# that every build and the peer see the same moments of a noisy machine (issue #3's A/B measure).
#   bench/proxy-builds.sh [BINARY...]   # e.g. copies of target/release/tailguard from two commits;
#                                       # none: target/release/tailguard (built)
# Each round, per proxy (`--workers 1`; HAProxy `nbthread 1`; the same single-process nginx
# backend): 64 closed-loop clients for DUR (4 s) after a 1 s warm-up; user and system time from
# /proc/PID/stat. Prints the medians over ROUNDS (6) and each build's ratios to HAProxy.
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-6}; DUR=${DUR:-4}
if [ $# -eq 0 ]; then build_tailguard; set -- "$TG"; fi
[ -x "$TG" ] || build_tailguard   # the load generator
for b in "$@"; do [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }; done
install_debian_peers

BACKEND=18380; PORT=18381
nginx_static $BACKEND
NAMES=(); declare -A AT PROC
for i in $(seq 1 $#); do
  name="$i:$(basename "${!i}")"; NAMES+=("$name")
  proxy_file "$WORK/tg$i.yaml" $PORT $BACKEND
  start "tg$i" "${!i}" proxy --config "$WORK/tg$i.yaml" --workers 1
  AT[$name]=$PORT; PROC[$name]=$LAST_PID; PORT=$((PORT + 1))
done
haproxy_file "$WORK/haproxy.cfg" $PORT $BACKEND
start haproxy /usr/sbin/haproxy -db -f "$WORK/haproxy.cfg"
NAMES+=(haproxy); AT[haproxy]=$PORT; PROC[haproxy]=$LAST_PID
for n in "${NAMES[@]}"; do wait_port "${AT[$n]}"; done

times() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
: >"$WORK/rounds"
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS ..." >&2
  for n in "${NAMES[@]}"; do
    url=http://127.0.0.1:${AT[$n]}/
    "$TG" load "$url" --clients 64 --duration 1s >/dev/null 2>&1
    read -r u0 s0 < <(times "${PROC[$n]}")
    "$TG" load "$url" --clients 64 --duration "${DUR}s" --json "$WORK/t.json" >/dev/null 2>"$WORK/load.err" ||
      { cat "$WORK/load.err" >&2; exit 1; }
    read -r u1 s1 < <(times "${PROC[$n]}")
    echo "$n $(jget "$WORK/t.json" 'r["requests"]') $((u1 - u0)) $((s1 - s0))" >>"$WORK/rounds"
  done
done
python3 - "$WORK/rounds" "$HZ" "$DUR" "${NAMES[@]}" <<'PY'
import statistics, sys
path, hz, dur, names = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
rows = {n: [] for n in names}
for line in open(path):
    n, req, u, s = line.split()
    req = int(req)
    rows[n].append((req / dur, int(u) / hz / req * 1e6, int(s) / hz / req * 1e6))
med = {n: [statistics.median(r[i] for r in rows[n]) for i in range(3)] for n in names}
print(f"proxy builds vs HAProxy, interleaved; medians of {len(rows['haproxy'])} rounds (64 clients, {dur:g} s)")
print(f"{'proxy':<28}{'req/s':>9}{'user µs':>9}{'sys µs':>9}{'total':>9}{'CPU ×':>8}{'thr ×':>8}")
ha_rps, ha_u, ha_s = med["haproxy"]
for n in names:
    rps, u, s = med[n]
    print(f"{n:<28}{rps:>9.0f}{u:>9.2f}{s:>9.2f}{u + s:>9.2f}{(u + s) / (ha_u + ha_s):>8.2f}{rps / ha_rps:>8.2f}")
PY
