"""Prompt sizing asks /tokenize on one kept-alive connection, and survives a server that closes it.

A worker sizing ``mix.yaml`` asks ~320 times; a new connection per count cost the client ~70 ms
of CPU against ~43 ms kept alive (measured against the simulator, 2026-12-04), and the server a
handshake per count. Servers close idle connections, or close after every answer: both must
still count every text.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tokenswarm.workload.tokencount import ServerTokenizeCounter


def tokenize_handler(how: str) -> type[BaseHTTPRequestHandler]:
    """vLLM's /tokenize, one token per word. ``how`` the server treats the connection after an
    answer: ``keep`` it open, ``say-close`` (``Connection: close``, then close) or ``drop`` it
    without a word, as an idle timeout does between two requests."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        connections: list[socket.socket] = []

        def setup(self) -> None:
            super().setup()
            Handler.connections.append(self.connection)

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = json.dumps({"count": len(body["prompt"].split())}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if how == "say-close":
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            if how == "drop":
                self.close_connection = True  # closed after this answer, though the client was told nothing

    return Handler


@contextmanager
def tokenize_server(how: str) -> Iterator[tuple[str, list[int]]]:
    """``(base URL, the connections the server accepted)``; on exit every connection is shut too,
    as a server that stops does (a handler thread would otherwise keep serving a kept-alive one)."""
    handler = tokenize_handler(how)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.connections
    finally:
        server.shutdown()
        server.server_close()
        for conn in handler.connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


TEXTS = [" ".join(["word"] * n) for n in range(1, 21)]


def test_every_count_goes_over_one_kept_alive_connection():
    with tokenize_server("keep") as (url, accepted):
        counter = ServerTokenizeCounter(url, "m")
        assert counter.probe()
        assert [counter.count(t) for t in TEXTS] == list(range(1, 21))
        assert counter.connections == 1 and len(accepted) == 1 and counter.calls == 21
        counter.close()
        assert counter.count("one two") == 2 and counter.connections == 2  # closed: a later count reconnects


@pytest.mark.parametrize("how", ["say-close", "drop"])
def test_a_server_that_closes_the_connection_after_each_answer_still_counts_every_text(how):
    with tokenize_server(how) as (url, accepted):
        counter = ServerTokenizeCounter(url, "m")
        assert counter.probe()
        assert [counter.count(t) for t in TEXTS] == list(range(1, 21))
        assert counter.connections == 21 and len(accepted) == 21
        assert not counter._warned  # no count fell back to the estimate


def test_a_server_that_is_gone_is_an_error_the_callers_handle_and_counting_falls_back():
    with tokenize_server("keep") as (url, _accepted):
        counter = ServerTokenizeCounter(url, "m")
        assert counter.probe()
    # the server is shut down: the kept-alive connection is dead and no new one can be made
    assert counter.count("a b c d e f g h") == counter.fallback.count("a b c d e f g h")
    assert counter._warned
    assert not ServerTokenizeCounter(url, "m").probe()
