"""benchmarks/accuracy.py: which goals a run misses, the cause it measured, and the cases it builds."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("accuracy_bench", ROOT / "benchmarks" / "accuracy.py")
accuracy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(accuracy)


def row(streams=64, ttft=0.5, gap=0.1, e2e=0.2, cpu=30.0, loop=0.8, srv=1.5, srv_loop=None, phases=False, over=0,
        over_first=0, over_late=0, over_req=0, send=None, **kw):
    r = dict(server="truth", case="spawn", streams=streams, ttft_err_p99_ms=ttft, gap_err_p99_ms=gap,
             e2e_err_p99_ms=e2e,
             client_cpu_max_pct=cpu, client_loop_lag_max_ms=loop, server_lag_p99_ms=srv,
             server_loop_lag_p99_ms=srv_loop, phases_recorded=phases, over_goal=over,
             over_goal_first_of_connection=over_first, over_goal_late_send=over_late, send_delay_p99_ms=send,
             connect_p99_ms=0.4, ttft_err_p99_first_ms=9.0, ttft_err_p99_reused_ms=0.3, failed=0,
             joined_pct=100.0, chunk_tokens_exact_pct=100.0, output_tokens_exact_pct=100.0,
             over_goal_request_side=over_req, request_side_p99_ms=0.2, response_side_p99_ms=0.3)
    r.update(kw)
    return r


def test_the_ttft_goal_is_one_ms_up_to_64_streams_and_two_above_and_the_gap_goal_always_one():
    assert [accuracy.goal_ms(n) for n in (1, 64, 65, 128)] == [1.0, 1.0, 2.0, 2.0]
    assert accuracy.misses(row(64, ttft=0.99, gap=0.99)) == []
    assert accuracy.misses(row(128, ttft=1.9)) == []
    assert accuracy.misses(row(64, ttft=1.1))[0].startswith("TTFT error p99 1.10 ms > 1 ms")
    assert accuracy.misses(row(128, gap=1.2))[0].startswith("chunk-gap error p99 1.20 ms > 1 ms")


def test_the_e2e_goal_is_one_ms_and_a_run_without_ends_misses_it():
    assert accuracy.misses(row(e2e=0.99)) == []
    assert accuracy.misses(row(e2e=1.3)) == ["e2e error p99 1.30 ms > 1 ms"]
    assert accuracy.misses(row(e2e=None)) == ["e2e error p99 n/a ms > 1 ms"]


def test_inexact_tokens_unjoined_requests_and_failures_are_each_a_missed_goal():
    assert "tokens not exact" in accuracy.misses(row(chunk_tokens_exact_pct=99.5))[0]
    assert "joined" in accuracy.misses(row(joined_pct=98.0))[0]
    assert accuracy.misses(row(failed=3)) == ["3 requests failed"]


def test_a_miss_made_of_first_requests_of_connections_is_blamed_on_new_connections():
    c = accuracy.causes(row(ttft=9.0, phases=True, over=10, over_first=9))
    assert c[0].startswith("new connections: 90% of the TTFTs over the goal are a connection's first request")
    assert not any("new connections" in x for x in accuracy.causes(row(ttft=9.0, phases=True, over=10, over_first=2)))


def test_the_late_half_of_the_ttft_errors_over_the_goal_is_named():
    req = accuracy.causes(row(ttft=9.0, over=10, over_req=8, request_side_p99_ms=8.5))
    assert req[0].startswith("request side: 80% of the TTFTs over the goal") and "p99 8.50 ms" in req[0]
    resp = accuracy.causes(row(ttft=9.0, over=10, over_req=3, response_side_p99_ms=6.0))
    assert resp[0].startswith("response side: 70% of the TTFTs over the goal") and "client read late" in resp[0]


def test_each_halfs_lateness_is_measured_from_the_runs_median_request():
    # the client's epoch and the server's monotonic clock differ by a constant (here 1000 s); one odd
    # request far on the early side does not move the others
    req, resp = accuracy.late_sides([1000.1, 1000.1, 1003.1, 900.0], [-999.9, -995.9, -999.9, -999.9])
    assert [round(x, 6) for x in req] == [0.0, 0.0, 3.0, -100.1] and [round(x, 6) for x in resp] == [0.0, 4.0, 0.0, 0.0]
    assert accuracy.late_sides([], []) == ([], [])


def test_a_server_that_read_requests_late_by_the_kernels_count_is_named():
    (late,) = accuracy.causes(row(ttft=4, server_read_delay_p99_ms=40.0))
    assert late.startswith("server lateness: it read requests late (kernel: p99 40 ms")
    assert accuracy.causes(row(ttft=4, server_read_delay_p99_ms=4.0))[0].startswith("no measured cause")


def test_each_measured_cause_is_named_and_an_unexplained_miss_says_so():
    assert not any("send delay" in x for x in accuracy.causes(row(ttft=4, send=3.0)))  # outside TTFT
    assert any("generator CPU 97 %" in x for x in accuracy.causes(row(ttft=4, cpu=97)))
    assert any("loop stalls (worst 12.0 ms)" in x for x in accuracy.causes(row(ttft=4, loop=12.0)))
    assert any("emission lag p99 40.0 ms" in x for x in accuracy.causes(row(ttft=4, srv=40.0)))
    assert any("event loop lag p99 3.0 ms" in x for x in accuracy.causes(row(ttft=4, srv_loop=3.0)))
    (both,) = accuracy.causes(row(ttft=4, srv=40.0, srv_loop=3.0))
    assert both.startswith("server lateness: emission lag") and "; event loop lag" in both
    (only,) = accuracy.causes(row(ttft=4))
    assert only.startswith("no measured cause") and "records no connection phases" in only


def test_the_verdict_lists_every_missed_run_and_skipped_case_then_counts():
    lines = accuracy.verdict([row(ttft=0.4), row(128, ttft=5.0, cpu=95), {**row(), "case": "nokeepalive",
                                                                           "skipped": "unknown field"}])
    assert lines[0].startswith("truth/spawn/128: MISSED TTFT error p99 5.00 ms > 2 ms -- cause: generator CPU 95 %")
    assert lines[1] == "truth/nokeepalive/64: not run: unknown field"
    assert lines[2].startswith("VERDICT: 1 of 2 runs miss a goal")
    assert accuracy.verdict([row()])[0].startswith("VERDICT: all goals met")


def test_the_cases_build_the_loads_the_issue_names():
    spawn = accuracy.scenario("spawn", 64, 5, "truth", (180, 360))["load"]
    assert spawn["steps"] == [64] and spawn["spawn_rate"] == 64 and spawn["warmup_s"] == 0
    assert accuracy.scenario("sweep", 128, 5, "sim", (180, 360))["load"]["steps"] == [32, 64, 128]
    assert accuracy.scenario("nokeepalive", 64, 5, "sim", (180, 360))["target"]["keep_alive"] is False
    burst = accuracy.scenario("burst", 64, 5, "truth", (180, 360))["load"]
    assert burst["mode"] == "open" and burst["arrival"] == "gamma" and burst["burstiness"] == 0.3
    # ~N streams by Little's law: 90 events of 10 ms plus the 20 ms TTFT per request
    assert abs(burst["steps"][0] - 64 / 0.92) < 0.1


def test_a_client_tree_must_be_a_tokenswarm_source_tree(tmp_path):
    import argparse

    import pytest

    assert accuracy.parse_client(f"this={ROOT}") == ("this", ROOT)
    for bad in (str(ROOT), f"x={tmp_path}", f"={ROOT}"):
        with pytest.raises(argparse.ArgumentTypeError, match="LABEL=DIR"):
            accuracy.parse_client(bad)


def test_a_case_the_client_does_not_know_is_reported_not_run():
    assert accuracy.client_supports(accuracy.scenario("spawn", 4, 1, "sim", (10, 20))) is None
    refused = accuracy.client_supports({**accuracy.scenario("spawn", 4, 1, "sim", (10, 20)),
                                        "target": {"no_such_option": 1}})
    assert "no_such_option" in refused


def test_every_record_is_analysed_and_a_late_server_read_shows_on_the_request_side(tmp_path):
    import json

    run = tmp_path / "run"
    run.mkdir()
    # server clock = client epoch - 1000 s; 20 ms server TTFT; the third request was noted 5 ms late
    truth, records = [], []
    for i, (delay_s, reused) in enumerate([(0.0, False), (0.0, True), (0.005, True)]):
        sent = 2000.0 + i
        received = sent - 1000.0 + 0.0001 + delay_s
        truth.append({"id": f"r{i}", "received": received, "output_tokens": 5,
                      "chunks": [[received + 0.020, 3], [received + 0.030, 2]]})
        ttft_ms = (received + 0.020 + 0.0001 - (sent - 1000.0)) * 1000.0  # the client saw the late read too
        records.append({"response_id": f"r{i}", "outcome": "ok", "sent_at_s": sent, "ttft_ms": ttft_ms,
                        "chunk_offsets_ms": [ttft_ms, ttft_ms + 10.0], "chunk_tokens": [3, 2], "output_tokens": 5,
                        "conn_reused": reused, "connect_ms": None if reused else 0.3})
    records.append({"response_id": None, "outcome": "connect_error", "sent_at_s": 2010.0, "ttft_ms": None})
    (run / "records.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    (tmp_path / "truth.jsonl").write_text("\n".join(json.dumps(t) for t in truth))
    a = accuracy.analyse(run, tmp_path / "truth.jsonl", goal=1.0)
    assert a["requests"] == 4 and a["failed"] == 1 and a["joined_pct"] == 100.0
    assert a["chunk_tokens_exact_pct"] == 100.0 and a["output_tokens_exact_pct"] == 100.0
    assert a["over_goal"] == 1 and a["over_goal_request_side"] == 1 and a["first_requests"] == 1
    assert abs(a["request_side_p99_ms"] - 5.0 * 0.98) < 0.2 and a["response_side_p99_ms"] < 0.01
    assert a["server_read_delay_p99_ms"] is None  # this log has no kernel read delays
    assert a["gap_err_p99_ms"] < 1e-6 and a["connect_p99_ms"] == 0.3
