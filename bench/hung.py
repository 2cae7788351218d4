#!/usr/bin/env python3
"""A hung upstream on 127.0.0.1:PORT for SECONDS: accepts every connection and reads what it is
sent, but never answers. Used by reliability.sh's HTTP/2 fan-out, where every request routed to it
waits until its client gives up. Bounded: it exits after SECONDS, closing every socket.

usage: hung.py PORT SECONDS
"""
import selectors
import socket
import sys
import time

from sockets import LISTENER, ready


def main():
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(4096)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, LISTENER)
    end = time.monotonic() + seconds
    most = 0
    try:
        while time.monotonic() < end:
            for _ in ready(sel, 0.1):
                pass  # what a client sends is read and dropped; a closed one is closed here too
            most = max(most, len(sel.get_map()) - 1)
    finally:
        print(f"most connections at once {most}", flush=True)
        for key in list(sel.get_map().values()):
            key.fileobj.close()


if __name__ == "__main__":
    main()
