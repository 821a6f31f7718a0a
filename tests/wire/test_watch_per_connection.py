"""A kept-alive connection is watched once, and every read of it keeps the watcher's count true.

The arrival watcher (``tokenswarm.wire.watch``) dates bytes by their offset in the connection
(TCP_INFO's received-bytes counter). Setting it up costs system calls (two TCP_INFO readings, a
FIONREAD, an epoll_ctl, and the same again to take it down), so a connection is registered at
its first response and stays registered while it is kept alive. That only dates right if the
watcher's position (the offset of the next byte to be read) follows every read: the HTTP
library's header reads and the hub reader's body reads alike.
"""

from __future__ import annotations

import time

import pytest

from tokenswarm.wire import kstamp, pool, watch

_fastread = pytest.importorskip("tokenswarm.wire._fastread")


def _client(url):
    from geventhttpclient import HTTPClient

    host, port = url.split("//")[1].split(":")
    client = HTTPClient(host, int(port), connection_timeout=2, network_timeout=30, concurrency=1)
    pool.tune_pool(client)
    return client


def _call(client, path):
    from tokenswarm.wire.client import stream_call
    from tokenswarm.wire.clock import WallAnchor

    return stream_call(client, path, b"{}", {"Content-Type": "application/json"},
                       base=dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="U", request_key="k",
                                 scheduled_at_s=0.0, schedule_lag_ms=0.0),
                       anchor=WallAnchor(0.0, 0.0), first_token_timeout_s=5, total_timeout_s=10)[0]


def _only_socket(client):
    socks = list(client._connection_pool._socket_queue.queue)
    assert len(socks) == 1  # concurrency=1: every request went out on this one connection
    return socks[0]


def test_a_kept_alive_connection_is_watched_once_and_its_position_follows_every_read(monkeypatch):
    from tests.helpers.procs import scripted_server

    if not (watch.ENABLED and kstamp.maps_onto(time.perf_counter)):
        pytest.skip("no arrival watcher or no kernel receive stamps here")
    starts = []
    real_start = watch.start
    monkeypatch.setattr(watch, "start", lambda fd: starts.append(fd) or real_start(fd))
    with scripted_server() as url:
        client = _client(url)
        # first event with the headers (library read), then events read from the hub, several sizes
        for path in ("/normal/v1/chat/completions?n=1&gap_ms=1", "/normal/v1/chat/completions?n=5&gap_ms=2",
                     "/normal/v1/chat/completions?n=3&gap_ms=1&delay_ms=5"):
            rec = _call(client, path)
            assert rec.outcome == "ok", rec.error
            sock = _only_socket(client)
            assert sock.watched
            fd = sock.fileno()
            before, notes = _fastread.took(fd, 0)  # the watcher's position, nothing consumed
            assert notes == []
            # the kernel's own position (received minus still queued), read afresh by watch()
            assert _fastread.watch(fd) == before
        assert len(starts) == 1  # three requests, one set-up
        watched = _fastread.watch_stats()["watched"]
        client.close()
        assert not sock.watched
        assert _fastread.watch_stats()["watched"] == watched - 1  # taken down before the fd closed
        pool.arrival_poller = None


def test_a_reader_that_would_not_advance_the_position_takes_the_connection_off_the_watcher(monkeypatch):
    from tests.helpers.procs import scripted_server
    from tokenswarm.wire import reader

    if not (watch.ENABLED and kstamp.maps_onto(time.perf_counter)):
        pytest.skip("no arrival watcher or no kernel receive stamps here")
    with scripted_server() as url:
        client = _client(url)
        assert _call(client, "/normal/v1/chat/completions?n=1&gap_ms=1").outcome == "ok"
        sock = _only_socket(client)
        assert sock.watched
        monkeypatch.setattr(reader, "FAST", False)  # hub reads through Python's recvmsg from here on
        rec = _call(client, "/normal/v1/chat/completions?n=4&gap_ms=2&delay_ms=5")
        assert rec.outcome == "ok", rec.error
        assert not _only_socket(client).watched
        client.close()
        pool.arrival_poller = None
