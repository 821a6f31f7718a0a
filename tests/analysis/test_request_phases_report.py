"""The report shows each step's request phases -- connect p50/p99, connection reuse, the
generator's send delay, time to first byte -- and its first page says where the generator
was late (send_delay_ms p99 > 1 ms)."""

import numpy as np
import pytest

from tests.analysis.runfactory import T0, record, step, write_run
from tokenswarm.analysis import load_run, step_table
from tokenswarm.analysis.health import SEND_DELAY_P99_LIMIT_MS, generator_health
from tokenswarm.analysis.render_doc import report_doc
from tokenswarm.analysis.summary import analyse, unitless_keys
from tokenswarm.manifest import RunManifest


def _phases(i: int, step_index: int, late: bool) -> dict:
    new = i % 4 == 0  # every fourth request opens a connection
    return dict(
        step=step_index, phase="steady", sent_at_s=T0 + step_index * 100 + 10 + i * 0.1,
        conn_reused=not new, connect_ms=(2.0 + i * 0.01) if new else None,
        send_delay_ms=(5.0 if late and i % 10 == 0 else 0.2), headers_ms=40.0 + (i % 5),
    )


@pytest.fixture
def two_steps(tmp_path):
    recs = [record(i, **_phases(i, 0, late=False)) for i in range(100)]
    recs += [record(100 + i, **_phases(i, 1, late=True)) for i in range(100)]
    steps = [step(0, "concurrency", 8, T0, T0 + 5, T0 + 100), step(1, "concurrency", 16, T0 + 100, T0 + 105, T0 + 200)]
    return write_run(tmp_path / "run", recs, steps=steps), recs


def test_each_step_reports_connect_percentiles_reuse_share_and_send_delay_p99(two_steps):
    path, recs = two_steps
    tables = step_table(load_run(path))
    for index in (0, 1):
        row = tables.row(index)
        mine = [r for r in recs if r["step"] == index]
        connects = [r["connect_ms"] for r in mine if r["connect_ms"] is not None]
        assert row["connect_count"] == len(connects) == 25
        assert row["connect_p50_ms"] == pytest.approx(np.percentile(connects, 50))
        assert row["connect_p99_ms"] == pytest.approx(np.percentile(connects, 99))
        assert row["conn_reused_share"] == pytest.approx(0.75)
        assert row["send_delay_p99_ms"] == pytest.approx(np.percentile([r["send_delay_ms"] for r in mine], 99))
        assert row["headers_p50_ms"] == pytest.approx(np.percentile([r["headers_ms"] for r in mine], 50))
    assert tables.row(0)["send_delay_p99_ms"] <= SEND_DELAY_P99_LIMIT_MS < tables.row(1)["send_delay_p99_ms"]


def test_the_first_page_says_the_generator_was_late_in_the_step_where_it_was(two_steps):
    path, _ = two_steps
    summary = analyse(load_run(path))
    health = summary["generator_health"]
    # the send delay is the generator's own, outside TTFT: a warning, not an overload banner
    assert not health["overloaded"] and health["late_send_steps"] == ["c16"]
    late = [m for m in health["messages"] if "send delay" in m]
    assert len(late) == 1 and late[0].startswith("Step c16:")
    blocks = report_doc(summary, {})
    headings = [b for b in blocks if b[0] == "h2"]
    assert headings[:2] == [("h2", "Summary per load step (steady window, all tasks)"), ("h2", "Warnings")]
    first_screen = blocks[:blocks.index(headings[2])]
    assert ("list", health["messages"]) in first_screen  # right after the step table: the first page
    assert not any(b[0] == "banner" and "OVERLOADED" in b[2] for b in blocks)
    phases = next(b for b in blocks if b == ("h2", "Request phases per load step (steady window, all tasks)"))
    table = blocks[blocks.index(phases) + 1]
    assert table[0] == "table" and [row[0] for row in table[2]] == ["c8", "c16"]
    assert unitless_keys(summary["steps"]) == []


def test_records_without_request_phases_report_none_and_flag_nothing(tmp_path):
    recs = [record(i, step=0, phase="steady", sent_at_s=T0 + 10 + i) for i in range(20)]
    path = write_run(tmp_path / "old", recs, steps=[step(0, "concurrency", 4, T0, T0 + 5, T0 + 100)])
    row = step_table(load_run(path)).row(0)
    assert row["connect_count"] == row["send_delay_count"] == 0
    assert row["connect_p99_ms"] is None and row["conn_reused_share"] is None
    health = generator_health(RunManifest(run_id="run"), [row])
    assert not health["overloaded"] and health["late_send_steps"] == []


def _worker(wid: str, **timing) -> dict:
    t = {"reader": "hub", "native_fast_path": True, "kernel_stamps": True, "arrival_watcher": True,
         "overrides": {}, "counters": {"reads_count": 100, "one_stamp_many_chunks_reads_count": 0,
                                       "notes_dropped_count": 0, "notes_over_cap_count": 0}}
    t.update(timing)
    return {"worker_id": wid, "timing": t}


def test_generator_health_names_the_timing_paths_and_every_fallback_that_happened():
    quiet = generator_health(RunManifest(run_id="run", workers=(_worker("w0"), _worker("w1"))))
    assert quiet["timing_paths"] == ["hub reader, native fast path, kernel stamps, arrival watcher"]
    ranged = generator_health(RunManifest(run_id="run", workers=(_worker("w0", read_batch_ms=1.0, read_batch_max_ms=4.0),
                                                                 _worker("w1", read_batch_ms=1.0, read_batch_max_ms=1.0))))
    assert ranged["timing_paths"] == [
        "hub reader, native fast path, kernel stamps, arrival watcher, sweeps every 1-4 ms as the streams' gaps allow",
        "hub reader, native fast path, kernel stamps, arrival watcher"], "a fixed period is the path as before"
    assert quiet["timing_counters"]["reads_count"] == 200 and quiet["messages"] == []
    counters = {"reads_count": 5, "one_stamp_many_chunks_reads_count": 2, "notes_dropped_count": 3}
    noisy = generator_health(RunManifest(run_id="run", workers=(
        _worker("w0", counters=counters),
        _worker("w1", kernel_stamps=False, native_fast_path=False, overrides={"TOKENSWARM_NATIVE": "0"}),
    )))
    assert len(noisy["timing_paths"]) == 2
    assert "Python parsers, no kernel stamps" in noisy["timing_paths"][1]
    assert "TOKENSWARM_NATIVE=0" in noisy["timing_paths"][1]
    text = " ".join(noisy["messages"])
    assert "Worker w1: no kernel receive stamps" in text
    assert "Timing: 2 read(s) held more chunks" in text and "Timing: 3 arrival note(s) were dropped" in text
    blocks = report_doc_health(noisy)
    assert any(b[0] == "p" and b[1].startswith("Timing path") for b in blocks)
    assert not any(b[0] == "p" and b[1].startswith("Sweep period") for b in blocks), "older manifests: no line"


def test_the_sweeps_by_period_of_all_workers_are_summed_and_shown_as_shares():
    swept = generator_health(RunManifest(run_id="run", workers=(
        _worker("w0", sweeps_by_period_ms={"1": 10, "2.5": 60}),
        _worker("w1", sweeps_by_period_ms={"2": 25, "2.5": 5}),
        _worker("w2"),  # a manifest from before the count
    )))
    assert swept["sweeps_by_period_ms"] == {"1": 10, "2": 25, "2.5": 65}, "summed, in order of period"
    lines = [b[1] for b in report_doc_health(swept) if b[0] == "p" and b[1].startswith("Sweep period")]
    assert lines == ["Sweep period (share of the 100 sweeps): 1 ms 10%, 2 ms 25%, 2.5 ms 65%."]


def report_doc_health(h):
    from tokenswarm.analysis.render_sections import health_blocks

    return health_blocks(h)
