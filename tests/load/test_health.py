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


def test_the_final_sample_reports_a_stall_of_a_run_shorter_than_the_sample_interval(monkeypatch):
    from tokenswarm.load import health

    now = [1000.0]
    monkeypatch.setattr(health.time, "time", lambda: now[0])
    mon = health.HealthMonitor("w1", lambda sample: None, sample_s=5.0)
    now[0] = 1004.2
    mon.lag.observe(expected_s=2.0, woke_s=4.2)         # the loop held 2.2 s, before any 5 s sample
    s = mon.final_sample()
    assert (s["since"], s["t"]) == (1000.0, 1004.2), "the sample covers the run since it started"
    assert s["loop_lag_max_ms"] == 2200.0 and s["untrusted"] == [f"event-loop lag 2200 ms > {health.LAG_LIMIT_MS:.0f} ms"]
    assert mon.summary()["max_loop_lag_ms"] == 2200.0


def test_an_untrusted_sample_marks_the_interval_it_covers(tmp_path):
    from tokenswarm.collect.manifest import ManifestFile
    from tokenswarm.manifest import RunManifest
    from tokenswarm.orchestrate.recording import RunRecording

    rec = RunRecording(tmp_path, ManifestFile(tmp_path, RunManifest(run_id="r")), writer=None, collector=None)
    rec.on_health_sample({"t": 1004.2, "since": 1000.0, "worker_id": "w1", "untrusted": ["event-loop lag 2200 ms"]})
    rec.on_health_sample({"t": 2010.0, "worker_id": "w1", "untrusted": ["CPU 99 %"]})  # an older sample: 5 s
    assert rec.untrusted == [[1000.0, 1004.2, "w1: event-loop lag 2200 ms"], [2005.0, 2010.0, "w1: CPU 99 %"]]
