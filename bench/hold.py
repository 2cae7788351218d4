#!/usr/bin/env python3
"""Holds N keep-alive HTTP/1.1 connections open to 127.0.0.1:PORT for SECONDS, each sending a GET
once every PERIOD seconds, the connections' turns spread evenly over the period (N / PERIOD
requests per second in all, one at a time: never a burst). Used by proxy-overhead.sh to measure a
proxy's resident memory per connection: every proxy is offered exactly the same connections.

Prints `open N` once every connection is open (SECONDS count from then), and `connections OPEN
requests OK failures FAILED` at the end; fails if a connection cannot be opened within 5 s.
Bounded: every connect has a timeout and the run ends SECONDS after the last connection opened.

usage: hold.py PORT N SECONDS [PERIOD]
"""
import selectors
import socket
import sys
import time

from sockets import ready


def main():
    port, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    period = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    sel = selectors.DefaultSelector()
    conns = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setblocking(False)
        conns.append(s)
        sel.register(s, selectors.EVENT_READ, len(conns) - 1)
    print(f"open {len(conns)}", flush=True)
    start = time.monotonic()
    waiting = [False] * n
    pending = [b""] * n
    ok = failed = 0
    # Send slot k is due at start + k * period / n and belongs to connection k mod n. A client
    # that falls behind (this is Python, on a shared machine) skips the slots it missed rather
    # than catching up in a burst, which would open extra upstream connections in the proxy.
    slot = 0
    while time.monotonic() - start < seconds:
        now = time.monotonic()
        due_slot = int((now - start) * n / period)
        if due_slot >= slot:
            i = due_slot % n
            if not waiting[i]:
                try:
                    conns[i].sendall(request)
                    waiting[i] = True
                except OSError:
                    failed += 1
            slot = due_slot + 1
        next_at = start + slot * period / n
        timeout = max(0.0, min(next_at - time.monotonic(), 0.05))
        for key, data in ready(sel, timeout):
            i = key.data
            if not data:
                failed += 1
                waiting[i] = False
                continue
            pending[i] += data
            # a whole response: head, then Content-Length bytes of body
            head, sep, body = pending[i].partition(b"\r\n\r\n")
            if not sep:
                continue
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(body) >= length:
                pending[i] = body[length:]
                waiting[i] = False
                if head.startswith(b"HTTP/1.1 2"):
                    ok += 1
                else:
                    failed += 1
    open_conns = len(sel.get_map())
    for s in conns:
        s.close()
    print(f"connections {open_conns} requests {ok} failures {failed}")


if __name__ == "__main__":
    main()
