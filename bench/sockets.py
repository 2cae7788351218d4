"""The select loop bench/hold.py and bench/hung.py share (imported, not run)."""
import selectors

LISTENER = "listener"
"""The data to register a listening socket with: `ready` accepts its connections."""


def ready(sel, timeout):
    """What the sockets registered in SEL have for us within TIMEOUT seconds. Yields (key, data)
    per socket that received something. A socket registered with data LISTENER accepts instead:
    the new connection is registered for reading (data None, non-blocking) and nothing is
    yielded. A socket whose peer closed it, or that failed, is unregistered and closed, and
    yields b"" (so a caller counts it)."""
    for key, _ in sel.select(timeout):
        sock = key.fileobj
        if key.data == LISTENER:
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            conn.setblocking(False)
            sel.register(conn, selectors.EVENT_READ)
            continue
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if not data:
            sel.unregister(sock)
            sock.close()
        yield key, data
