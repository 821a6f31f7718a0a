"""The common part of the small JSON servers in tests/helpers (run as ``python SCRIPT PORT LIFETIME_S``).

Each script's handler derives from :class:`JSONHandler` and is served by :func:`serve`, which
binds 127.0.0.1 and exits the process after the lifetime, so a crashed test never leaves a
server behind.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JSONHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler with one way to answer: a JSON body and its length."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet: the test reads answers, not logs
        pass

    def answer_json(self, code: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_json(self) -> Any:
        """The request's JSON body (None when it has none)."""
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None


def serve(handler: type[BaseHTTPRequestHandler], argv: list[str] | None = None) -> None:
    """Serve ``handler`` on 127.0.0.1:PORT for LIFETIME_S seconds (default 120), from ``argv``."""
    argv = sys.argv if argv is None else argv
    port = int(argv[1])
    lifetime_s = float(argv[2]) if len(argv) > 2 else 120.0
    threading.Timer(lifetime_s, lambda: os._exit(0)).start()  # never outlive a crashed test
    ThreadingHTTPServer(("127.0.0.1", port), handler).serve_forever()
