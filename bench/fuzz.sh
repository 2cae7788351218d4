#!/usr/bin/env bash
# The fuzz targets of the parsers tailguard owns (fuzz/, docs/security.md), each run by libFuzzer
# for a bounded number of inputs, then one table: target, inputs run, crashes, exec/s, seconds.
#   bench/fuzz.sh [TARGET...]     # default: every target (`cargo fuzz list`)
# RUNS inputs per target (default 1,000,000), each target capped at MAX_TIME seconds (default
# 1800); an input running over 10 s counts as a crash (a hang), and a target stops at its first
# crash. SANITIZER: none (default, the
# fastest) or address (AddressSanitizer, for the unsafe code of the YAML parser; about 2x
# slower). Seeds: examples/ for the experiment file, fuzz/seeds/TARGET for the others; inputs
# that found new code are kept in fuzz/corpus/TARGET (not in git), so later runs start there.
# A crash leaves its input in fuzz/artifacts/TARGET/; replay it with
# `cargo fuzz run TARGET fuzz/artifacts/TARGET/crash-...` (RUSTC_BOOTSTRAP=1 on stable Rust).
# `make test` runs the same entry points on the seeds and 20,000 seeded mutants each (tests/fuzz.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-1000000}; MAX_TIME=${MAX_TIME:-1800}; SANITIZER=${SANITIZER:-none}
# cargo fuzz passes -Z flags to rustc; stable rustc accepts them with this (nightly needs nothing).
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
if [ $# -eq 0 ]; then mapfile -t targets < <(cargo fuzz list); else targets=("$@"); fi
# cargo fuzz's default build: optimised, with debug assertions and overflow checks (an overflow
# is a crash here, where `cargo test --release` would wrap).
cargo fuzz build --sanitizer "$SANITIZER"
LOGS=$(mktemp -d /tmp/tailguard-fuzz.XXXXXX); trap 'rm -rf "$LOGS"' EXIT

seeds() {   # the seed directories of target $1
  case $1 in
    experiment) echo examples examples/tune ;;
    *) echo "fuzz/seeds/$1" ;;
  esac
}

rows=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  before=$(ls "fuzz/artifacts/$t" | wc -l)
  echo "fuzzing $t: $RUNS inputs, at most $MAX_TIME s ..." >&2
  started=$SECONDS
  # shellcheck disable=SC2046
  cargo fuzz run --sanitizer "$SANITIZER" "$t" "fuzz/corpus/$t" $(seeds "$t") -- \
    -runs="$RUNS" -max_total_time="$MAX_TIME" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    >"$LOGS/$t.log" 2>&1 || tail -30 "$LOGS/$t.log" >&2
  stat() { sed -n "s/^stat::$1: *//p" "$LOGS/$t.log" | tail -1; }
  runs=$(stat number_of_executed_units); speed=$(stat average_exec_per_sec); secs=$((SECONDS - started))
  crashes=$(( $(ls "fuzz/artifacts/$t" | wc -l) - before ))
  rows+=("$(printf '| %s | %s | %s | %s | %s |' "$t" "${runs:-0}" "$crashes" "${speed:-?}" "$secs")")
done
echo "| target | inputs run | crashes | exec/s | seconds |"
echo "|---|---:|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
echo "(RUNS=$RUNS MAX_TIME=$MAX_TIME SANITIZER=$SANITIZER, $(nproc) cores, $(date -u +%F))"
