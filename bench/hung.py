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


def main():
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(4096)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    end = time.monotonic() + seconds
    most = 0
    try:
        while time.monotonic() < end:
            for key, _ in sel.select(0.1):
                if key.fileobj is listener:
                    try:
                        conn, _ = listener.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    sel.register(conn, selectors.EVENT_READ)
                    most = max(most, len(sel.get_map()) - 1)
                    continue
                try:
                    data = key.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
    finally:
        print(f"most connections at once {most}", flush=True)
        for key in list(sel.get_map().values()):
            key.fileobj.close()


if __name__ == "__main__":
    main()
