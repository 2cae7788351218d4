#!/usr/bin/env python3
"""Holds N slow connections open to 127.0.0.1:PORT for SECONDS, each of one KIND of attack:

  header   a request head that never ends: one more header byte every 2 s (classic slowloris)
  body     a whole head announcing a 1,000-byte body, then one body byte every 2 s
  preface  the first 16 bytes of the HTTP/2 preface, then nothing
  idle     nothing at all: a connection opened and left idle

Prints `open N failed-to-open F` once the connections are open (all connect at once; one not
connected after 5 s is counted in F, not retried; SECONDS count from then) and `closed-by-peer C`
at the end (connections the proxy closed before the run ended). Bounded: the connects have 5 s
and the run ends SECONDS after the last connection opened; every socket is closed.

usage: slowloris.py PORT N SECONDS KIND
"""
import selectors
import socket
import sys
import time

FIRST = {
    "header": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
    "body": b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n",
    "preface": b"PRI * HTTP/2.0\r\n",
    "idle": b"",
}
TRICKLE = {"header": b"a", "body": b"a", "preface": None, "idle": None}
EVERY = 2.0


def open_all(port, n):
    """N connections to 127.0.0.1:PORT, connecting at once (non-blocking), with 5 s for all: the
    sockets connected, and how many did not connect in time (beyond a server's accept backlog the
    kernel drops SYNs, and a blocking connect would wait for each in turn)."""
    sel = selectors.DefaultSelector()
    pending = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_WRITE)
        pending.append(s)
    connected = []
    end = time.monotonic() + 5
    while sel.get_map() and time.monotonic() < end:
        for key, _ in sel.select(max(0.0, end - time.monotonic())):
            sel.unregister(key.fileobj)
            if key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                connected.append(key.fileobj)
            else:
                key.fileobj.close()
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    return connected, n - len(connected)


def main():
    port, n, seconds, kind = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    if kind not in FIRST:
        sys.exit(f"unknown kind {kind!r}: one of {', '.join(FIRST)}")
    conns = []
    try:
        conns, failed = open_all(port, n)
        for s in conns:
            s.send(FIRST[kind])
        print(f"open {len(conns)} failed-to-open {failed}", flush=True)
        n = len(conns)
        start = time.monotonic()
        closed = set()
        # Connection k trickles at start + k * EVERY / n + j * EVERY: spread evenly, never a burst.
        slot = 0
        while time.monotonic() - start < seconds:
            due = start + slot * EVERY / n
            now = time.monotonic()
            if due > now:
                time.sleep(min(due - now, 0.05))
                continue
            k = slot % n
            slot += 1
            if k in closed or TRICKLE[kind] is None:
                continue
            try:
                conns[k].send(TRICKLE[kind])
            except OSError:
                closed.add(k)
        print(f"closed-by-peer {len(closed)}", flush=True)
    finally:
        for s in conns:
            s.close()


if __name__ == "__main__":
    main()
