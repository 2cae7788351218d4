#!/usr/bin/env bash
# The simulator and the lab on the same experiment file: p50 and p99 of every run the lab can do
# (oracle variants are simulator-only), as lab / sim ratios, and the success rates, against the
# bounds the lab is held to (p50 within ±5 %, p99 within ±10 %, success within 0.5 percentage point:
# a lab run that is as fast as the simulator's but fails more requests is no match). The table is
# bench/lab_vs_sim.py's. Extra arguments go to `tailguard lab run` (e.g. `--isolation netns`);
# `--seed`, `--scenario` and `--variant` go to the simulator too, so that both sides run the same
# runs. Both run the file's `quick` overrides, or its full length with FULL=1; `--duration` and
# `--warmup` are refused (the simulator has no such option: set the file's `quick` durations).
# LAB_RESULTS=DIR/results.json compares an earlier `tailguard lab run` instead of starting one
# (its seed is used; FULL=1 if it ran without --quick). Exits 1 when any run is out of bounds, and
# says which bound; 2 when the runs cannot be compared (different seeds or durations). A variant
# whose sidecar is HAProxy's or nginx's (docs/lab.md, "Peer sidecars") is compared like any
# other, its name followed by the peer's: the simulator runs the peer's own policies.
# The machine's calibration (`tailguard lab calibrate`, docs/lab.md "Calibration") makes the
# simulator charge the lab's hops: CALIBRATION=FILE gives it to both sides (the lab records it in
# results.json); with LAB_RESULTS, the calibration recorded there is used unless CALIBRATION says
# otherwise. Without one the simulator charges nothing for the sidecars (the file's network only).
# SEEDS=N also runs the simulator at seeds 1 to N and says, under each row, whether the lab's p50
# and p99 are within their bounds of the simulator's spread over them (bench/lab_vs_sim.py; the
# bounds against the lab's own seed and the exit status are unchanged).
#
#   bench/lab-vs-sim.sh examples/speculative.yaml
#   bench/lab-vs-sim.sh examples/balancing.yaml --scenario fast-error --variant bloc
#   FULL=1 LAB_RESULTS=lab-out/peers-.../results.json bench/lab-vs-sim.sh examples/peers.yaml
#   CALIBRATION=calibration.yaml bench/lab-vs-sim.sh examples/hedging.yaml --scenario bimodal-30
#   SEEDS=35 LAB_RESULTS=lab-out/hedging/results.json bench/lab-vs-sim.sh examples/hedging.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
FILE=${1:?usage: [FULL=1] [LAB_RESULTS=results.json] bench/lab-vs-sim.sh FILE [lab options...]}
shift
SIM_ARGS=()
LAB_ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --seed|--scenario|--variant) SIM_ARGS+=("$1" "${2:?$1 needs a value}"); LAB_ARGS+=("$1" "$2"); shift 2 ;;
    --seed=*|--scenario=*|--variant=*) SIM_ARGS+=("$1"); LAB_ARGS+=("$1"); shift ;;
    --duration|--duration=*|--warmup|--warmup=*|--quick)
      echo "error: $1: the simulator cannot follow it; set the file's durations (or its quick ones; FULL=1 for the full length)" >&2
      exit 2 ;;
    *) LAB_ARGS+=("$1"); shift ;;
  esac
done
QUICK=(--quick)
[ "${FULL:-0}" = 1 ] && QUICK=()
TG=target/release/tailguard
[ -x "$TG" ] || cargo build --release --locked
OUT=$(mktemp -d /tmp/tailguard-lab-vs-sim.XXXXXX)
if [ -n "${CALIBRATION:-}" ]; then
  LAB_ARGS+=(--calibration "$CALIBRATION")
  SIM_ARGS+=(--calibration "$CALIBRATION")
elif [ -n "${LAB_RESULTS:-}" ] && python3 bench/lab_vs_sim.py --calibration "$LAB_RESULTS" >"$OUT/calibration.json"; then
  SIM_ARGS+=(--calibration "$OUT/calibration.json")
fi
if [ -n "${LAB_RESULTS:-}" ]; then
  LAB_JSON=$LAB_RESULTS
  case " ${SIM_ARGS[*]} " in
    *" --seed "*|*" --seed="*) ;;
    *) SIM_ARGS+=(--seed "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["seed"])' "$LAB_JSON")") ;;
  esac
else
  LAB_JSON=$OUT/lab/results.json
  "$TG" lab run "$FILE" "${QUICK[@]}" --out "$OUT/lab" "${LAB_ARGS[@]}" >/dev/null
fi
"$TG" sim "$FILE" "${QUICK[@]}" "${SIM_ARGS[@]}" --json "$OUT/sim.json" >/dev/null
SEED_JSONS=()
if [ -n "${SEEDS:-}" ]; then
  UNSEEDED=()   # the simulator's arguments without their --seed
  for ((i = 0; i < ${#SIM_ARGS[@]}; i++)); do
    case ${SIM_ARGS[i]} in
      --seed) i=$((i + 1)) ;;
      --seed=*) ;;
      *) UNSEEDED+=("${SIM_ARGS[i]}") ;;
    esac
  done
  for k in $(seq 1 "$SEEDS"); do
    "$TG" sim "$FILE" "${QUICK[@]}" "${UNSEEDED[@]}" --seed "$k" --json "$OUT/seed-$k.json" >/dev/null
    SEED_JSONS+=("$OUT/seed-$k.json")
  done
fi
python3 bench/lab_vs_sim.py "$OUT/sim.json" "$LAB_JSON" "${SEED_JSONS[@]}"
