"""The Parquet records store: schema, round trip, row groups by size and age, a killed writer."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenswarm.collect.parquet_store import (
    JSON_FIELDS,
    SCHEMA,
    ParquetRecordsWriter,
    StoreFormatError,
    iter_records,
    store_parts,
    write_records,
)
from tokenswarm.record import FIELD_NAMES, RequestRecord

ROOT = Path(__file__).resolve().parents[2]


def _full(i: int) -> RequestRecord:
    """A record with every field set to a non-default value (derived from the dataclass)."""
    values = {}
    for f in dataclasses.fields(RequestRecord):
        t = SCHEMA.field(f.name).type
        if f.name in JSON_FIELDS:
            values[f.name] = {"k": i, "nested": [1, 2.5, None]}
        elif pa.types.is_list(t):
            values[f.name] = [1.5 * i, 2.25 * i + 1] if pa.types.is_floating(t.value_type) else [i + 1, 3]
        elif pa.types.is_boolean(t):
            values[f.name] = True
        elif pa.types.is_integer(t):
            values[f.name] = i + 7
        elif pa.types.is_floating(t):
            values[f.name] = i + 0.125
        else:
            values[f.name] = "ok" if f.name == "outcome" else f"{f.name}-{i}"
    return RequestRecord(**values)


def _sparse(i: int) -> RequestRecord:
    """A record with only the required fields: every optional one is None (or its default)."""
    return RequestRecord(run_id="r", worker_id="w0", seq=i, task="qa", user_class="U", outcome="timeout",
                         request_key=f"k{i}", scheduled_at_s=1.0 + i, sent_at_s=1.5 + i)


def test_every_record_field_is_a_column_in_record_order():
    assert tuple(SCHEMA.names) == FIELD_NAMES
    assert all(f.nullable for f in SCHEMA)
    assert SCHEMA.field("chunk_offsets_ms").type == pa.list_(pa.float64())
    assert SCHEMA.field("chunk_tokens").type == pa.list_(pa.int32())


def test_round_trip_keeps_every_field_and_every_none(tmp_path):
    recs = [_full(i) for i in range(5)] + [_sparse(i) for i in range(5, 9)]
    write_records(tmp_path, recs)
    back = list(iter_records(tmp_path))
    assert back == recs
    assert back[-1].ttft_ms is None and back[-1].chunk_offsets_ms is None and back[-1].spec_decode is None


def test_row_groups_are_cut_by_size_each_as_a_finished_part(tmp_path):
    w = ParquetRecordsWriter(tmp_path, row_group_records=4)
    for i in range(10):
        w.write_lines(_full(i).to_json() + b"\n", 1)
    assert [p.name for p in store_parts(tmp_path)[0]] == ["records-000001.parquet", "records-000002.parquet"]
    w.close()
    parts, warnings = store_parts(tmp_path)
    assert [pq.ParquetFile(p).metadata.num_rows for p in parts] == [4, 4, 2] and not warnings
    assert w.records_written == 10 and w.bytes_written == sum(p.stat().st_size for p in parts)


def test_a_periodic_flush_cuts_a_group_only_once_the_oldest_record_is_max_age_old(tmp_path):
    now = [100.0]
    w = ParquetRecordsWriter(tmp_path, row_group_records=1000, max_age_s=60.0, clock=lambda: now[0])
    w.write_lines(_full(0).to_json() + b"\n", 1)
    now[0] = 159.0
    w.flush()
    assert store_parts(tmp_path)[0] == []
    now[0] = 160.0
    w.flush()
    assert len(store_parts(tmp_path)[0]) == 1


def test_a_part_of_an_unknown_store_version_is_refused_naming_the_file(tmp_path):
    table = pa.table({"run_id": ["r"]}).replace_schema_metadata({b"tokenswarm.store_format_version": b"99"})
    pq.write_table(table, tmp_path / "records-000001.parquet")
    with pytest.raises(StoreFormatError, match="records-000001.parquet.*99"):
        list(iter_records(tmp_path))


CHILD = textwrap.dedent("""
    import sys
    from tokenswarm.collect.parquet_store import ParquetRecordsWriter
    from tokenswarm.record import RequestRecord
    w = ParquetRecordsWriter(sys.argv[1], row_group_records=50)
    for i in range(10_000_000):
        r = RequestRecord(run_id="r", worker_id="w0", seq=i, task="qa", user_class="U", outcome="ok",
                          request_key=f"k{i}", scheduled_at_s=1.0 + i, sent_at_s=1.0 + i, ttft_ms=10.0, e2e_ms=30.0,
                          chunk_offsets_ms=[10.0, 20.0, 30.0], chunk_tokens=[1, 2, 1], output_tokens=4)
        w.write_lines(r.to_json() + b"\\n", 1)
        if i % 50 == 49:
            print(len(w.paths), flush=True)
""")


def test_a_writer_killed_mid_run_keeps_every_finished_row_group(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        assert proc.stdout is not None
        while int(proc.stdout.readline() or 0) < 3:
            assert time.monotonic() < deadline and proc.poll() is None, "the writer did not write 3 groups"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    parts, _ = store_parts(tmp_path)
    assert len(parts) >= 3
    seqs = [r.seq for r in iter_records(tmp_path)]
    assert seqs == list(range(50 * len(parts)))  # every finished group whole, in order, nothing half


def test_a_batch_that_does_not_fit_the_schema_is_kept_as_json_and_the_error_names_the_field(tmp_path, caplog):
    w = ParquetRecordsWriter(tmp_path, row_group_records=2)
    good = _full(0).to_json() + b"\n"
    bad = good.replace(b'"ttft_ms":0.125', b'"ttft_ms":"fast"')
    w.write_lines(good + bad, 2)
    w.close()
    kept = (tmp_path / "records-rejected.jsonl").read_bytes()
    assert kept == good + bad
    assert "field 'ttft_ms' = 'fast'" in caplog.text and "records-rejected.jsonl" in caplog.text


def test_export_writes_the_json_lines_a_jsonl_run_would_have(tmp_path, capsys):
    from tokenswarm.cli import main

    recs = [_full(i) for i in range(3)] + [_sparse(3)]
    write_records(tmp_path, recs, row_group_records=2)
    assert main(["export", str(tmp_path), "--jsonl"]) == 0
    assert (tmp_path / "records.jsonl").read_bytes() == b"".join(r.to_json() + b"\n" for r in recs)
    assert main(["export", str(tmp_path), "--jsonl"]) == 2  # refuses to overwrite
    assert "exists" in capsys.readouterr().err


def test_export_of_a_directory_without_parts_says_so(tmp_path, capsys):
    from tokenswarm.cli import main

    assert main(["export", str(tmp_path), "--jsonl"]) == 2
    assert "no records-NNNNNN.parquet parts" in capsys.readouterr().err


def test_auto_format_is_parquet_for_soak_runs_and_jsonl_otherwise():
    from types import SimpleNamespace

    from tokenswarm.collect.parquet_store import choose_format

    short = SimpleNamespace(steps=(1, 2), warmup_s=5, step_duration_s=60, report_interval_s=None)
    day = SimpleNamespace(steps=(16,), warmup_s=60, step_duration_s=86400, report_interval_s=None)
    live = SimpleNamespace(steps=(4,), warmup_s=5, step_duration_s=600, report_interval_s=60)
    assert choose_format("auto", short) == "jsonl"
    assert choose_format("auto", day) == "parquet" and choose_format("auto", live) == "parquet"
    assert choose_format("auto", day, jsonl_options=True) == "jsonl"
    assert choose_format("parquet", short) == "parquet" and choose_format("jsonl", day) == "jsonl"
    with pytest.raises(ValueError, match="records-format"):
        choose_format("csv", short)
