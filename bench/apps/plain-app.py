"""A plain application for bench/admission-plain-app.sh: Python's ThreadingHTTPServer (HTTP/1.0,
listen backlog 5), 1 ms of work a request. Usage: plain-app.py PORT."""

import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        start = time.perf_counter()
        while time.perf_counter() - start < 0.001:
            pass
        body = b"ok\n"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
