"""HAProxy's `balance random(1)` against the simulator's model of its consistent-hash ring
(crates/policy/src/peer/haproxy.rs): each of N servers' share of the requests Debian's HAProxy
sends them, beside the share of the 2^32 keys the model gives each server's 16 ring points.

    python3 bench/haproxy-ring.py [REQUESTS] [SERVERS]

Starts HAProxy (from PATH or /usr/sbin) with one backend of SERVERS servers on 127.0.0.1, each a
thread of this script counting the requests it answers; sends REQUESTS requests one at a time on
one keep-alive connection; stops HAProxy by its PID. Prints how many requests in a row went to
the server the model's key sequence names (HAProxy's keys are not random: every process's thread
0 draws the same ones, docs/lab.md), then per server the model's share, the measured share and
the difference in standard errors.
"""

from __future__ import annotations

import bisect
import http.client
import http.server
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

POINTS = 16  # BE_WEIGHT_SCALE × weight 1
STRIDE = 256 * 16  # SRV_EWGHT_RANGE
MASK = 0xFFFFFFFF


def full_hash(a: int) -> int:
    """HAProxy's full_hash (include/haproxy/intops.h), in 32-bit arithmetic."""
    a = ((a + 0x7ED55D16) + (a << 12)) & MASK
    a = ((a ^ 0xC761C23C) ^ (a >> 19)) & MASK
    a = ((a + 0x165667B1) + (a << 5)) & MASK
    a = ((a + 0xD3A2646C) ^ (a << 9)) & MASK
    a = ((a + 0xFD7046C5) + (a << 3)) & MASK
    a = ((a ^ 0xB55A4F09) ^ (a >> 16)) & MASK
    return (a * 3221225473) & MASK


def model_ring(servers: int) -> list[tuple[int, int]]:
    """The ring's points, `(key, server)` sorted by key: POINTS per server at
    `full_hash(puid * STRIDE + n)`."""
    return sorted((full_hash((puid * STRIDE + n) & MASK), puid - 1) for puid in range(1, servers + 1) for n in range(POINTS))


def lookup(ring: list[tuple[int, int]], key: int) -> int:
    """The server of the point nearest `key` on `ring`, the earlier on a tie."""
    at = bisect.bisect_left(ring, (key, -1)) % len(ring)
    before = (at - 1) % len(ring)
    near_before = ((key - ring[before][0]) & MASK) <= ((ring[at][0] - key) & MASK)
    return ring[before][1] if near_before else ring[at][1]


def model_sequence(servers: int, requests: int) -> list[int]:
    """The servers the model's HAProxy thread 0 sends `requests` requests to, one after another:
    `statistical_prng` (xorshift32, shifts 13, 17, 5, from 2463534242) looked up on the ring."""
    ring = model_ring(servers)
    state, out = 2463534242, []
    for _ in range(requests):
        state ^= (state << 13) & MASK
        state ^= state >> 17
        state ^= (state << 5) & MASK
        out.append(lookup(ring, state))
    return out


def model_shares(servers: int) -> list[float]:
    """Each server's share of the keys: a key goes to the nearest point, the earlier on a tie."""
    ring = model_ring(servers)
    owned = [0.0] * servers
    for i, (key, server) in enumerate(ring):
        prev_key = ring[i - 1][0]
        next_key = ring[(i + 1) % len(ring)][0]
        below = (key - prev_key) & MASK  # keys after the previous point, up to this one
        above = (next_key - key) & MASK
        # A key k between two points goes to the earlier when k - prev <= next - k.
        owned[server] += below - (below + 1) // 2 + 1 + (above - 1) // 2 if below else 1 + (above - 1) // 2
    total = sum(owned)
    return [o / total for o in owned]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def counting_backends(
    servers: int, hold: float = 0.0, order: list[int] | None = None
) -> tuple[list[int], threading.Lock, list[http.server.ThreadingHTTPServer]]:
    """`servers` HTTP servers on 127.0.0.1, each answering a GET after `hold` seconds and counting
    it in its slot of the returned list (under the returned lock), and appending its index to
    `order` when given; they run until the process ends."""
    counts = [0] * servers
    lock = threading.Lock()

    def handler(index: int) -> type[http.server.BaseHTTPRequestHandler]:
        class Count(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                with lock:
                    counts[index] += 1
                    if order is not None:
                        order.append(index)
                if hold:
                    time.sleep(hold)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        return Count

    backends = []
    for i in range(servers):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(i))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        backends.append(server)
    return counts, lock, backends


def main(argv: list[str]) -> int:
    requests = int(argv[1]) if len(argv) > 1 else 4000
    servers = int(argv[2]) if len(argv) > 2 else 10
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.path.exists(haproxy):
        print("haproxy is not installed (apt-get install haproxy)", file=sys.stderr)
        return 2
    order: list[int] = []
    counts, lock, backends = counting_backends(servers, order=order)
    listen = free_port()
    lines = [
        "global", "    maxconn 1024", "defaults", "    mode http", "    timeout connect 1s",
        "    timeout client 10s", "    timeout server 10s", "frontend f", f"    bind 127.0.0.1:{listen}",
        "    default_backend b", "backend b", "    balance random(1)",
    ]
    lines += [f"    server b-{i} 127.0.0.1:{s.server_address[1]}" for i, s in enumerate(backends)]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write("\n".join(lines) + "\n")
        proc = subprocess.Popen([haproxy, "-db", "-f", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", listen, timeout=5)
                    conn.request("GET", "/")
                    conn.getresponse().read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            with lock:
                counts[:] = [0] * servers
                order.clear()
            for _ in range(requests):
                conn.request("GET", "/")
                conn.getresponse().read()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    # The connection's first request (above) drew the sequence's first key.
    expected = model_sequence(servers, requests + 1)[1:]
    same = next((i for i, (a, b) in enumerate(zip(order, expected)) if a != b), len(order))
    print(f"sequence: HAProxy's first {min(40, len(order))} servers {''.join(map(str, order[:40]))}")
    print(f"          the model's               {''.join(map(str, expected[:40]))}")
    print(f"          the same for the first {same} of {len(order)} requests")
    shares = model_shares(servers)
    print(f"{'server':>6} {'model':>7} {'HAProxy':>8} {'z':>6}   ({requests} requests, balance random(1))")
    for i, (share, count) in enumerate(zip(shares, counts)):
        measured = count / requests
        z = (measured - share) / (share * (1 - share) / requests) ** 0.5
        print(f"{i + 1:>6} {100 * share:6.2f}% {100 * measured:7.2f}% {z:+6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
