"""A server that records the headers of every request it gets: ``grabber.py PORT LIFETIME_S``.

Stands in for an attacker's host (or any host the target's credentials must not reach).
``GET /v1/models`` answers one model so a run proceeds past preflight; every other path
answers 404. ``GET /_grabbed`` returns what was received so far, as JSON:
``[{"method", "path", "headers": {name: value}}, ...]`` (its own requests are not listed).
"""

from __future__ import annotations

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: its sibling modules
from jsonhttp import JSONHandler, serve

GRABBED: list[dict] = []
LOCK = threading.Lock()


class Handler(JSONHandler):
    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.path == "/_grabbed":
            with LOCK:
                self.answer_json(200, {"grabbed": list(GRABBED)})
            return
        with LOCK:
            GRABBED.append({"method": self.command, "path": self.path, "headers": dict(self.headers.items())})
        if self.path.rstrip("/").endswith("/models"):
            self.answer_json(200, {"object": "list", "data": [{"id": "grab-model", "object": "model"}]})
        else:
            self.answer_json(404, {"error": {"message": "not here"}})

    do_GET = do_POST = _handle


if __name__ == "__main__":
    serve(Handler)
