"""HAProxy's `balance random(N)` under load against the simulator's model of it
(crates/policy/src/peer/haproxy.rs): N draws on the consistent-hash ring, the server serving
fewer requests wins (the later draw on ties). CLIENTS closed-loop clients send requests through
one Debian HAProxy to 10 servers on 127.0.0.1 that each hold a request 200 ms (no queue); the
script prints each server's share of the requests HAProxy sent and of those the model sends in
the same closed loop (simulated here over the same ring, bench/haproxy-ring.py's).

    python3 bench/haproxy-p2c.py [CLIENTS] [SECONDS] [DRAWS]     # default 20 8 2

Stops HAProxy by its PID.
"""

from __future__ import annotations

import heapq
import http.client
import http.server
import importlib.util
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

SERVERS = 10
HOLD = 0.2


def ring_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("ring", os.path.join(os.path.dirname(__file__), "haproxy-ring.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model_counts(clients: int, draws: int, seconds: float) -> list[int]:
    """The model's picks in a closed loop of `clients`, each request held HOLD s."""
    r = ring_module()
    ring = r.model_ring(SERVERS)
    rng = random.Random(1)
    served = [0] * SERVERS
    picked = [0] * SERVERS

    def pick() -> int:
        best = -1
        for _ in range(draws):
            current = r.lookup(ring, rng.getrandbits(32))
            if best >= 0 and best != current and served[current] > served[best]:
                current = best
            best = current
        served[best] += 1
        picked[best] += 1
        return best

    events = [(HOLD * rng.random(), pick()) for _ in range(clients)]
    heapq.heapify(events)
    while events:
        now, server = heapq.heappop(events)
        served[server] -= 1
        if now < seconds:
            heapq.heappush(events, (now + HOLD, pick()))
    return picked


def main(argv: list[str]) -> int:
    clients = int(argv[1]) if len(argv) > 1 else 20
    seconds = float(argv[2]) if len(argv) > 2 else 8.0
    draws = int(argv[3]) if len(argv) > 3 else 2
    r = ring_module()
    haproxy = "/usr/sbin/haproxy"
    if not os.path.exists(haproxy):
        print("haproxy is not installed (apt-get install haproxy)", file=sys.stderr)
        return 2
    counts, lock, backends = r.counting_backends(SERVERS, HOLD)
    listen = r.free_port()
    lines = [
        "global", "    maxconn 1024", "defaults", "    mode http", "    timeout connect 1s",
        "    timeout client 10s", "    timeout server 10s", "frontend f", f"    bind 127.0.0.1:{listen}",
        "    default_backend b", "backend b", f"    balance random({draws})",
    ]
    lines += [f"    server b-{i} 127.0.0.1:{s.server_address[1]}" for i, s in enumerate(backends)]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write("\n".join(lines) + "\n")
        proc = subprocess.Popen([haproxy, "-db", "-f", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1)
            with lock:
                counts[:] = [0] * SERVERS
            end = time.monotonic() + seconds

            def client() -> None:
                conn = http.client.HTTPConnection("127.0.0.1", listen, timeout=10)
                while time.monotonic() < end:
                    conn.request("GET", "/")
                    conn.getresponse().read()

            threads = [threading.Thread(target=client) for _ in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    model = model_counts(clients, draws, seconds)
    total, model_total = sum(counts), sum(model)
    print(f"{clients} clients, balance random({draws}), {total} requests: each server's share, %")
    print("HAProxy " + " ".join(f"{100 * c / total:5.1f}" for c in counts))
    print("model   " + " ".join(f"{100 * c / model_total:5.1f}" for c in model))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
