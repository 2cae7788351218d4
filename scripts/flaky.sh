#!/usr/bin/env bash
# Runs the tests that time real processes and sockets N times in a row on a loaded machine and
# reports every test that failed at least once:
#
#   scripts/flaky.sh [N]        # N rounds (default 10)
#
# The tests: the lab (crates/cli/tests/lab.rs, lab_real.rs), the proxy (crates/proxy/tests/, one binary, but
# the `kube` feature's), the load generator (crates/load/tests/) and serve (crates/serve/tests/),
# built once with `make test`'s profile (and `make suites`: h2spec and grpc-go's interop, which
# the proxy's suite tests then require, as in `make test`). While they run, two busy loops hold the machine's two
# cores as other work would; each is bounded by `timeout` and stopped by its PID on exit.
# A test binary gets at most 10 min a round. Logs of the rounds that failed stay in
# target/flaky/. Exit status 1 when any test failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-10}
PROFILE=test-release
FEATURES=(--features tailguard/kube) # as `make test` builds them
LOGS=target/flaky
case $ROUNDS in '' | *[!0-9]*) echo "usage: scripts/flaky.sh [N]" >&2; exit 2 ;; esac

# Package and test target of every binary, as Cargo names them.
TESTS=(
  "tailguard lab" "tailguard lab_real"
  "tailguard-proxy proxy"
  "tailguard-load load" "tailguard-load cpu"
  "tailguard-serve serve"
)
mkdir -p target
make --no-print-directory suites >/dev/null
export TAILGUARD_REQUIRE_SUITES=1
args=()
for t in "${TESTS[@]}"; do
  read -r package target <<<"$t"
  args+=(-p "$package" --test "$target")
done
# The executables Cargo builds, with the package folder each runs in (as `cargo test` does).
cargo test --profile "$PROFILE" --locked --no-run "${FEATURES[@]}" "${args[@]}" --message-format=json 2>/dev/null |
  python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(os.path.dirname(m["manifest_path"]), m["target"]["name"], m["executable"])
'  >"$LOGS.list" || {
  cargo test --profile "$PROFILE" --locked --no-run "${FEATURES[@]}" "${args[@]}" # shows the build error
  exit 1
}
[ "$(wc -l <"$LOGS.list")" -eq "${#TESTS[@]}" ] || { echo "expected ${#TESTS[@]} test binaries" >&2; exit 1; }

BUSY=()
stop_busy() {
  local p
  for p in "${BUSY[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  for p in "${BUSY[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null || true; done
}
trap stop_busy EXIT
trap 'exit 130' INT TERM
# Each loop ends by itself after 20 min per round at most, should this script be killed outright.
for _ in 1 2; do
  timeout $((ROUNDS * 1200)) sh -c 'while :; do :; done' &
  BUSY+=($!)
done

rm -rf "$LOGS"
mkdir -p "$LOGS"
declare -A failures=()
started=$(date +%s)
for round in $(seq 1 "$ROUNDS"); do
  while read -r dir target exe; do
    name=$(basename "$dir")/$target   # e.g. proxy/cancel, serve/cancel
    log=$LOGS/$round-${name//\//-}.log
    status=0
    (cd "$dir" && timeout 600 "$exe") >"$log" 2>&1 || status=$?
    if [ "$status" -eq 0 ]; then
      rm "$log"
      continue
    fi
    failed=$(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$log")
    # A binary that crashed or timed out without naming a test counts as the binary's failure.
    [ -n "$failed" ] || failed="(the whole binary: exit status $status)"
    while read -r test; do
      key="$name::$test"
      failures[$key]=$((${failures[$key]:-0} + 1))
      echo "round $round: $key FAILED ($log)"
    done <<<"$failed"
  done <"$LOGS.list"
  echo "round $round of $ROUNDS done, $(($(date +%s) - started)) s"
done

echo
echo "$ROUNDS rounds of ${#TESTS[@]} test binaries with two busy loops on the cores:"
if [ ${#failures[@]} -eq 0 ]; then
  echo "no test failed"
  exit 0
fi
for key in "${!failures[@]}"; do
  echo "  $key: failed ${failures[$key]} of $ROUNDS"
done | sort
exit 1
