"""The simulator reads each request off its connection in memory: framing, limits, a client gone."""

import pytest

from tokenswarm.sim.http import MAX_HEADER_BYTES, BadRequest, read_request


class Pieces:
    """A connection whose reads return these byte strings, one per read, then b"" (closed)."""

    def __init__(self, *pieces: bytes) -> None:
        self.pieces = list(pieces)

    def recv(self, n: int) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""


def test_a_request_split_across_reads_is_read_whole_and_the_next_ones_bytes_are_kept():
    buf = bytearray()
    conn = Pieces(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\nX-A: b\r\n", b"\r\nhel",
                  b"loGET /health HTTP/1.1\r\n\r\n")
    req = read_request(conn, buf)  # type: ignore[arg-type]
    assert req is not None
    assert (req.method, req.target, req.body, req.keep) == ("POST", "/v1/completions", b"hello", True)
    assert req.headers["x-a"] == "b", "header names are lower-cased"
    nxt = read_request(conn, buf)  # type: ignore[arg-type]
    assert nxt is not None and (nxt.method, nxt.target, nxt.body) == ("GET", "/health", b"")


def test_a_chunked_body_is_reassembled():
    conn = Pieces(b"POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\n\r\n")
    req = read_request(conn, bytearray())  # type: ignore[arg-type]
    assert req is not None and req.body == b"abcdefg"


@pytest.mark.parametrize(("head", "keep"), [
    (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", False),
    (b"GET / HTTP/1.0\r\n\r\n", False),
    (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", True),
])
def test_keep_alive_follows_the_version_and_the_connection_header(head, keep):
    req = read_request(Pieces(head), bytearray())  # type: ignore[arg-type]
    assert req is not None and req.keep is keep


@pytest.mark.parametrize(("pieces", "status"), [
    ((b"GARBAGE\r\n\r\n",), 400),
    ((b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",), 400),
    ((b"POST / HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n",), 413),
    ((b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEADER_BYTES, b"more"), 431),
])
def test_a_request_the_simulator_does_not_take_is_refused_with_its_status(pieces, status):
    with pytest.raises(BadRequest) as exc:
        read_request(Pieces(*pieces), bytearray())  # type: ignore[arg-type]
    assert exc.value.status == status


@pytest.mark.parametrize("pieces", [
    (),
    (b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nab",),
])
def test_a_client_that_goes_away_mid_request_ends_the_connection_without_a_request(pieces):
    assert read_request(Pieces(*pieces), bytearray()) is None  # type: ignore[arg-type]
