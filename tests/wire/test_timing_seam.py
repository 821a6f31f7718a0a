"""The timing seam (tokenswarm/wire/timing.py): which paths timed a run, their fallback
counters, the C dating functions table by table, and the C code's warnings-as-errors build."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from geventhttpclient import HTTPClient

from tests.helpers.procs import scripted_server
from tokenswarm.wire import timing

fastread = pytest.importorskip("tokenswarm.wire._fastread", reason="the C extension is not built")
LOAD = Path(timing.__file__).parent
OFFSET = 1_700_000_000.0  # realtime minus monotonic seconds
MAX_AGE_S = 10.0


@pytest.mark.parametrize(
    "stamp, arrival, now, expected, why",
    [
        (OFFSET + 9.5, 10.0, 10.2, 9.5, "earlier than the read's own stamp: the note's date"),
        (OFFSET + 10.0, 10.0, 10.2, 10.0, "the same moment as the read: the read's stamp"),
        (OFFSET + 10.5, 10.0, 10.2, 10.0, "later than the read (a segment after the note): the read's stamp"),
        (OFFSET - 5.0, 10.0, 10.2, 10.0, "older than max_age (a wall-clock step): the read's stamp"),
    ],
)
def test_a_note_dates_bytes_only_earlier_than_the_read_and_within_max_age(stamp, arrival, now, expected, why):
    assert fastread.note_date(stamp, arrival, OFFSET, now, MAX_AGE_S) == pytest.approx(expected), why


@pytest.mark.parametrize(
    "ends, notes, expected",
    [
        # chunks end at rx 10, 20, 30; a note "the first 25 bytes had arrived by 9.5"
        ([10, 20, 30], [(25, OFFSET + 9.5)], [9.5, 9.5, 10.0]),
        # each chunk's first covering note; the last chunk came after every note
        ([10, 20, 30], [(10, OFFSET + 9.1), (22, OFFSET + 9.4)], [9.1, 9.4, 10.0]),
        # a note exactly at a chunk's end covers it
        ([10, 20], [(20, OFFSET + 9.7)], [9.7, 9.7]),
        ([10, 20], [], [10.0, 10.0]),  # no notes: the read's stamp
        ([10, 20], [(5, OFFSET + 9.0)], [10.0, 10.0]),  # a note about bytes before the read's chunks end
    ],
)
def test_each_chunk_gets_the_first_note_that_covers_its_last_byte(ends, notes, expected):
    dates = fastread.date_chunks(ends, notes, 0, 10.0, OFFSET, 10.2, MAX_AGE_S)
    assert dates == pytest.approx(expected)


def test_chunk_ends_count_from_the_reads_first_rx_offset():
    assert fastread.date_chunks([10], [(1010, OFFSET + 9.5)], 1000, 10.0, OFFSET, 10.2, MAX_AGE_S) == [9.5]


@pytest.mark.parametrize(
    "notes, total, expected",
    [
        ([(5, OFFSET + 9.0), (25, OFFSET + 9.5)], 30, [(5, 9.0), (25, 9.5)]),
        ([(5, OFFSET + 9.0), (5, OFFSET + 9.2)], 30, [(5, 9.0)]),  # one cut per offset
        ([(30, OFFSET + 9.0)], 30, None),  # covers the whole read: the read's own date decides
        ([(5, OFFSET + 11.0)], 30, None),  # not earlier than the read
        ([], 30, None),
    ],
)
def test_undecoded_bytes_are_cut_where_notes_saw_them_arrive(notes, total, expected):
    # (halves and wholes: exact in binary, so the dates compare exactly)
    assert fastread.date_cuts(notes, 0, total, 10.0, OFFSET, 10.2, MAX_AGE_S) == expected


def test_provenance_names_every_path_and_the_overrides_in_effect(monkeypatch):
    for name in timing.OVERRIDES:  # whatever switches this test process was started with
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TOKENSWARM_READ_BATCH_MS", "1")
    p = timing.provenance()
    assert set(p) == {"reader", "native_fast_path", "native_built", "native_chunks", "kernel_stamps",
                      "arrival_watcher", "read_batch_ms", "read_batch_max_ms", "head_reader", "overrides", "counters",
                      "sweeps_by_period_ms"}
    assert p["overrides"] == {"TOKENSWARM_READ_BATCH_MS": "1"}
    assert p["native_built"] is True and p["reader"] in ("hub", "greenlet")
    assert p["head_reader"] in ("hub", "library")
    assert all(k.endswith("_count") and isinstance(v, int) for k, v in p["counters"].items())
    assert {"sweeps_count", "sweep_crowded_reads_count", "sweep_period_changes_count"} <= set(p["counters"])
    assert p["read_batch_max_ms"] >= p["read_batch_ms"]
    periods = p["sweeps_by_period_ms"]  # the sweeps again, by period (none if no poller has swept here)
    assert all(isinstance(n, int) and n > 0 for n in periods.values())
    assert [float(k) for k in periods] == sorted(float(k) for k in periods), "in order of period"
    assert sum(periods.values()) <= p["counters"]["sweeps_count"]


@pytest.mark.usefixtures("hub_reader")  # the counters count the event-loop reader's reads
def test_the_read_counters_count_the_native_reads_of_a_stream():
    from tokenswarm.record import RecordIdentity
    from tokenswarm.wire import reader
    from tokenswarm.wire.client import stream_call
    from tokenswarm.wire.clock import WallAnchor
    from tokenswarm.wire.transport import PoolTransport
    if not reader.FAST:
        pytest.skip("the native fast path is off here")
    counted = timing.provenance()["counters"]
    before, chunks_before = counted["reads_count"], counted["native_chunk_events_count"]
    with scripted_server() as url:
        host, port = url.split("//")[1].split(":")
        client = HTTPClient(host, int(port), connection_timeout=2, network_timeout=30, concurrency=1)
        base = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="U", request_key="k", scheduled_at_s=0.0)
        rec, _ = stream_call(PoolTransport(client, time.perf_counter), "/normal/v1/chat/completions?n=5&gap_ms=10", b"{}", {},
                             identity=RecordIdentity(**base),
                             anchor=WallAnchor(0.0, 0.0), first_token_timeout_s=5, total_timeout_s=10)
    assert rec.outcome == "ok", rec.error
    counted = timing.provenance()["counters"]
    assert counted["reads_count"] > before  # the body went through read_events
    # and its five completion chunks (and [DONE]) into the stream state through feed_chunks
    assert counted["native_chunk_events_count"] >= chunks_before + 6, (chunks_before, counted)


@pytest.mark.usefixtures("hub_reader")  # the counters count the event-loop reader's reads
def test_the_watcher_reports_dropped_and_over_cap_notes_as_counters_that_never_go_back():
    keys = ("notes_dropped", "notes_over_cap", "notes", "stalled_sweeps", "wakeups")
    first = fastread.watch_stats()
    test_the_read_counters_count_the_native_reads_of_a_stream()  # a watched stream between the readings
    second = fastread.watch_stats()
    for k in keys:
        assert type(first[k]) is int and type(second[k]) is int, (k, first, second)
        assert 0 <= first[k] <= second[k], (k, first, second)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
@pytest.mark.parametrize("source", ["_fastread.c", "_watch.c", "_chunks.c", "_record.c", "_sweep.c"])
def test_the_c_code_compiles_with_all_warnings_as_errors(source):
    include = sysconfig.get_paths()["include"]
    cmd = ["cc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror", f"-I{include}",
           "-c", str(LOAD / source), "-o", "/dev/null"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


class _Readings:
    """A clock that returns the given readings in turn."""

    def __init__(self, values):
        self.values = list(values)

    def __call__(self):
        return self.values.pop(0)


def test_a_preempted_realtime_reading_is_taken_again_and_paired_with_its_brackets_midpoint():
    from tokenswarm.wire import kstamp

    # first bracket 5 ms wide (preempted between the readings), second 10 µs wide
    mono = _Readings([1.000, 1.005, 2.000, 2.00001])
    real = _Readings([101.004, 102.000005])
    assert kstamp.real_minus_mono(mono, real) == pytest.approx(100.0, abs=1e-9)


def test_the_narrowest_bracket_wins_when_every_reading_was_preempted():
    from tokenswarm.wire import kstamp

    mono = _Readings([1.0, 1.004, 2.0, 2.001, 3.0, 3.003])
    real = _Readings([101.0035, 102.0005, 103.0025])
    assert kstamp.real_minus_mono(mono, real) == pytest.approx(100.0, abs=1e-9)


def test_provenance_with_the_c_paths_switched_off_says_they_were_built_but_not_used():
    # TOKENSWARM_NATIVE is read at import: a fresh process shows what its manifest would say
    out = subprocess.run([sys.executable, "-c", "import json; from tokenswarm.wire import timing; "
                          "print(json.dumps(timing.provenance()))"],
                         env={**{k: v for k, v in os.environ.items() if k not in timing.OVERRIDES},
                              "TOKENSWARM_NATIVE": "0"}, capture_output=True, text=True, timeout=60, check=True).stdout
    p = json.loads(out)
    assert p["native_built"] is True  # the extension is there ...
    assert p["native_fast_path"] is False and p["native_chunks"] is False  # ... and its paths are off
    assert p["overrides"] == {"TOKENSWARM_NATIVE": "0"}
    assert "reads_count" in p["counters"]  # its counters are still read (the watcher has its own switch)


@pytest.mark.parametrize("hub", [True, False])
def test_provenance_names_the_reader_the_transport_routes_streams_to(hub, monkeypatch):
    from tokenswarm.wire import reader

    monkeypatch.setattr(reader, "USE_HUB_READER", hub)
    assert timing.provenance()["reader"] == ("hub" if hub else "greenlet")
