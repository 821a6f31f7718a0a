"""A server that records the headers of every request it gets: ``grabber.py PORT LIFETIME_S``.

Stands in for an attacker's host (or any host the target's credentials must not reach).
``GET /v1/models`` answers one model so a run proceeds past preflight; every other path
answers 404. ``GET /_grabbed`` returns what was received so far, as JSON:
``[{"method", "path", "headers": {name: value}}, ...]`` (its own requests are not listed).
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GRABBED: list[dict] = []
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _answer(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.path == "/_grabbed":
            with LOCK:
                self._answer(200, {"grabbed": list(GRABBED)})
            return
        with LOCK:
            GRABBED.append({"method": self.command, "path": self.path, "headers": dict(self.headers.items())})
        if self.path.rstrip("/").endswith("/models"):
            self._answer(200, {"object": "list", "data": [{"id": "grab-model", "object": "model"}]})
        else:
            self._answer(404, {"error": {"message": "not here"}})

    do_GET = do_POST = _handle


def main() -> None:
    port, lifetime_s = int(sys.argv[1]), float(sys.argv[2])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Timer(lifetime_s, server.shutdown).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
