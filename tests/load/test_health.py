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


def test_cpu_share_is_cpu_seconds_over_the_interval_and_not_observed_over_a_too_short_one():
    from tokenswarm.load.health import CPU_MIN_INTERVAL_S, cpu_pct

    assert cpu_pct(0.45, 5.0) == 9.0
    assert cpu_pct(9.5, 5.0) == 190.0, "two busy threads on two cores read above one core"
    assert cpu_pct(0.01, CPU_MIN_INTERVAL_S / 10) is None, "one 10 ms tick in 50 ms is not a 20 % share"


def test_a_sample_reads_the_cpu_used_since_the_previous_one_from_injected_clocks():
    from tokenswarm.load.health import HealthMonitor

    mono, cpu = [50.0], [3.0]
    mon = HealthMonitor("w1", lambda sample: None, clock=lambda: mono[0], cpu_s=lambda: cpu[0])
    mono[0], cpu[0] = 55.0, 7.75                        # 4.75 CPU s in 5 s
    assert mon.sample()["cpu_pct"] == 95.0
    mono[0], cpu[0] = 55.0001, 7.76                     # a final sample 100 us later: one tick
    last = mon.sample()
    assert last["cpu_pct"] is None and last["untrusted"] is None, "a tick is not a 10,000 % spike"
    assert mon.summary()["max_cpu_pct"] == 95.0


def test_the_final_sample_reports_a_stall_of_a_run_shorter_than_the_sample_interval(monkeypatch):
    from tokenswarm.load import health

    now = [1000.0]
    monkeypatch.setattr(health.time, "time", lambda: now[0])
    mono = [0.0]  # the process's CPU share over this 4.2 s is 10 %, whatever the test machine does
    mon = health.HealthMonitor("w1", lambda sample: None, sample_s=5.0, clock=lambda: mono[0],
                               cpu_s=lambda: mono[0] / 10)
    now[0], mono[0] = 1004.2, 4.2
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
