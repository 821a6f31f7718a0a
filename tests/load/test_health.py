"""Self-monitoring arithmetic, with scripted times."""

from tokenswarm.load.health import LagTracker, merge_windows, untrusted_reasons


def test_lag_is_how_late_the_probe_woke_and_resets_per_sample():
    t = LagTracker()
    t.observe(expected_s=1.0, woke_s=1.0005)
    t.observe(expected_s=2.0, woke_s=2.030)
    t.observe(expected_s=3.0, woke_s=2.999)  # early wake-ups count as no lag
    mx, mean = t.take()
    assert round(mx, 3) == 30.0 and round(mean, 3) == round((0.5 + 30.0 + 0.0) / 3, 3)
    assert t.take() == (0.0, 0.0)


def test_cpu_or_loop_lag_over_the_limit_makes_a_window_untrusted():
    assert untrusted_reasons({"cpu_pct": 50, "loop_lag_max_ms": 3}) == []
    assert untrusted_reasons({"cpu_pct": 97, "loop_lag_max_ms": 3}) == ["generator CPU 97% > 90%"]
    assert untrusted_reasons({"cpu_pct": 10, "loop_lag_max_ms": 45}) == ["event-loop lag 45 ms > 20 ms"]


def test_adjacent_untrusted_windows_merge():
    w = merge_windows([[10, 15, "a"], [15, 20, "a"], [40, 45, "b"], [19, 25, "c"]], 5.0)
    assert w == [[10, 25, "a; c"], [40, 45, "b"]]


def test_open_sockets_counts_this_process_sockets():
    import socket

    from tokenswarm.load.health import open_sockets

    before = open_sockets()
    socks = [socket.socket() for _ in range(7)]
    try:
        assert open_sockets() == before + 7
    finally:
        for s in socks:
            s.close()


def test_a_sample_counts_the_arrivals_the_watcher_dated_during_stalls(monkeypatch):
    from tokenswarm.load.health import HealthMonitor
    from tokenswarm.wire import watch

    if not watch.ENABLED:
        assert "stall_notes" not in HealthMonitor("w1", lambda sample: None).sample()
        return
    # the watcher's own count, whatever it is, passes through unchanged; a fixed value proves it
    # is read from the watcher and not computed or defaulted by the monitor
    monkeypatch.setattr(watch, "watch_stats", lambda: {"notes": 4242})
    assert HealthMonitor("w1", lambda sample: None).sample()["stall_notes"] == 4242
