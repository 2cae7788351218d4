#!/usr/bin/env bash
# Installs the Debian packages `make test` needs, when missing (`make deps`, run first by `make test`).
#
# - iproute2 (ip, tc): the lab's --isolation netns test;
# - python3-venv: the tuner's virtual environment (make build);
# - nginx, redis-server, memcached: the lab's real-program nodes (crates/cli/tests/lab_real.rs);
#   the lab starts its own instances by PID, so the packages' system services are not used;
# - haproxy (and nginx): the lab's peer sidecars (crates/cli/tests/lab_real.rs, docs/lab.md);
# - chromium: the report's headless-browser test (crates/report/tests/browser.rs);
# - nghttp2-client (h2load): an HTTP/2 client of the proxy written outside the project
#   (crates/proxy/tests/h2load.rs);
# - postgresql: the tuner's shared-study test (python/tests/test_postgres.py) starts its own server
#   with initdb + pg_ctl, which Debian keeps in /usr/lib/postgresql/N/bin, off PATH.
#
# Installs only what is missing and says so. Not root (or no apt-get): lists what is missing and
# the command that installs it, and fails, since the tests would fail later for a worse reason.
#
# `--peers` (`make demo`): nginx and HAProxy only; where they cannot be installed it says so and
# succeeds, and `tailguard demo` runs without the missing peer.
set -euo pipefail

peers_only=false
[ "${1:-}" = --peers ] && peers_only=true
what="test dependencies"
$peers_only && what="demo peers (nginx, HAProxy)"

missing=()
{ command -v nginx || [ -x /usr/sbin/nginx ]; } >/dev/null || missing+=(nginx)
{ command -v haproxy || [ -x /usr/sbin/haproxy ]; } >/dev/null || missing+=(haproxy)
if ! $peers_only; then
  command -v ip >/dev/null || missing+=(iproute2)
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v memcached >/dev/null || missing+=(memcached)
  command -v chromium >/dev/null || missing+=(chromium)
  command -v h2load >/dev/null || missing+=(nghttp2-client)
  { command -v initdb || compgen -G '/usr/lib/postgresql/*/bin/initdb'; } >/dev/null || missing+=(postgresql)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "$what: all installed"
  exit 0
fi
install="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  if $peers_only; then
    echo "$what: ${missing[*]} missing and not installable here (not root, or no apt-get); the demo runs" \
      "without them (as root: $install)" >&2
    exit 0
  fi
  {
    echo "$what missing: ${missing[*]}"
    if command -v apt-get >/dev/null; then
      echo "install them as root, then run make test again:"
      echo "  sudo apt-get update && sudo $install"
    else
      echo "this is not a Debian/Ubuntu machine (no apt-get): install the equivalent packages with"
      echo "your system's package manager, then run make test again"
    fi
  } >&2
  exit 1
fi
echo "$what: installing ${missing[*]}"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive $install -qq >/dev/null; }; then
  $peers_only || exit 1
  echo "$what: installing ${missing[*]} failed; the demo runs without them" >&2
  exit 0
fi
echo "$what: installed ${missing[*]}"
