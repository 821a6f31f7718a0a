"""The connection pool adjustments: no yield between the send time and the send, and
kernel-stamped header reads (tokenswarm/wire/pool.py)."""

import greenlet
from gevent import socket
from geventhttpclient import HTTPClient

from tests.helpers.procs import scripted_server
from tokenswarm.wire import kstamp
from tokenswarm.wire.pool import StampedSocket, socket_alive, tune_pool


def _pair():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    return client, server


def test_an_idle_kept_alive_socket_is_alive_and_a_closed_or_dirty_one_is_not():
    client, server = _pair()
    assert socket_alive(client)
    server.sendall(b"stray")  # bytes nobody asked for: the connection is not clean
    gevent_sleep_until_readable(client)
    assert not socket_alive(client)
    client2, server2 = _pair()
    server2.close()  # FIN
    gevent_sleep_until_readable(client2)
    assert not socket_alive(client2)
    client2.close()
    assert not socket_alive(client2) and not socket_alive(None)
    for s in (client, server):
        s.close()


def gevent_sleep_until_readable(sock):
    from gevent import select

    select.select([sock], [], [], 2.0)


def _yields_while_taking_a_kept_alive_socket(client):
    pool = client._connection_pool
    me = greenlet.getcurrent()
    resumed = []

    def trace(event, args):
        if event in ("switch", "throw") and args[1] is me:
            resumed.append(1)

    old = greenlet.settrace(trace)
    try:
        sock = pool.get_socket()  # what the library does right before writing the request
    finally:
        greenlet.settrace(old)
    pool.return_socket(sock)
    return len(resumed)


def test_a_tuned_pool_hands_out_a_kept_alive_socket_without_yielding():
    # tokenswarm takes the send time just before the library's request(); a yield inside it
    # (the library's liveness check) put an event-loop round trip into the measured TTFT.
    path = "/normal/v1/chat/completions?n=1&gap_ms=1"
    with scripted_server() as url:
        host, port = url.split("//")[1].split(":")
        plain = HTTPClient(host, int(port), concurrency=2)
        tuned = HTTPClient(host, int(port), concurrency=2)
        tune_pool(tuned)
        for c in (plain, tuned):
            c.request("POST", path, body=b"{}").read()  # connect once: the next request reuses it
        assert _yields_while_taking_a_kept_alive_socket(plain) == 1
        assert _yields_while_taking_a_kept_alive_socket(tuned) == 0
        resp = tuned.request("POST", path, body=b"{}")
        assert resp.status_code == 200  # the kept-alive socket was judged alive and reused
        resp.read()
        if kstamp.ENABLED:
            sock = tuned._connection_pool._socket_queue.queue[-1]
            assert isinstance(sock, StampedSocket) and sock.last_anc  # its header read was stamped


def test_the_cached_request_head_is_the_bytes_the_library_builds_for_every_body_and_header_set():
    from tokenswarm.wire.send import request_head

    bodies = [b"", b"x", b"{}" * 300, b"y" * 70000]
    header_sets = [
        {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"},
        {"Content-Type": "application/json", "Authorization": "Bearer k", "Connection": "close"},
        {"Host": "other:81", "X-A": "1"},
        {"Content-Length": "5"},  # sets its own length: built by the library every time
        {"Transfer-Encoding": "chunked"},
    ]
    for client in (HTTPClient("127.0.0.1", 9), HTTPClient("localhost", 80), HTTPClient("::1", 8000)):
        for headers in header_sets:
            for path in ("/v1/chat/completions", "/v1/completions?x=1"):
                for body in bodies * 2:  # the second time from the cache
                    want = client._build_request("POST", path, body=body, headers=headers, chunked=False)
                    assert request_head(client, path, body, headers) == want.encode("latin-1")


def _stamped_pair():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = StampedSocket()
    client.connect(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    return client, server


def test_a_request_is_sent_whole_whether_one_send_takes_it_or_the_buffer_fills():
    import gevent

    for size in (600, 1 << 20):  # a usual request; one far larger than the 4 KB send buffer
        client, server = _stamped_pair()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        data = (bytes(range(256)) * (size // 256 + 1))[:size]
        got = bytearray()

        def read_all(server=server, got=got, size=size):
            while len(got) < size:
                got.extend(server.recv(1 << 16))

        reader = gevent.spawn(read_all)
        client.sendall(data)  # the large one: one send takes a part, gevent's waiting send the rest
        reader.join(timeout=10)
        assert bytes(got) == data, f"{size} bytes: {len(got)} arrived, in order: {bytes(got) == data[:len(got)]}"
        assert client._response_pending, "the next read is the response's first"
        for s in (client, server):
            s.close()
