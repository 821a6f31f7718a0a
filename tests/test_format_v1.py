"""Runs written before the record's format_version 2 (where ``sent_at`` and ``scheduled_at``
carried no unit in their names) are still read: by the analysis from JSON lines and from a
Parquet store, by ``tokenswarm export``, and as a trace to replay. Versions never written are
refused with the file named."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.analysis import runfactory as rf
from tokenswarm.analysis.errors import RunInputError
from tokenswarm.analysis.loader import load_run
from tokenswarm.collect.parquet_store import ParquetRecordsWriter, iter_records
from tokenswarm.record import FORMAT_VERSION, V1_RENAMED_FIELDS, RequestRecord, record_from_dict
from tokenswarm.workload.trace import load_trace


def as_v1(record: dict) -> dict:
    """A record dict as format_version 1 wrote it."""
    new_to_old = {new: old for old, new in V1_RENAMED_FIELDS.items()}
    return {new_to_old.get(k, k): v for k, v in record.items()}


def records(n: int = 6) -> list[dict]:
    return [rf.record(i) for i in range(n)]


def test_the_current_format_names_both_wall_clock_fields_with_their_unit():
    assert FORMAT_VERSION >= 2
    assert set(V1_RENAMED_FIELDS.values()) <= set(RequestRecord.__dataclass_fields__)
    assert not set(V1_RENAMED_FIELDS) & set(RequestRecord.__dataclass_fields__)


def test_a_version_1_jsonl_run_reads_the_same_as_today_s(tmp_path):
    today = load_run(rf.write_run(tmp_path / "v2", records()))
    old = load_run(rf.write_run(tmp_path / "v1", [as_v1(r) for r in records()], format_version=1))
    assert old.manifest.format_version == 1
    for name in V1_RENAMED_FIELDS.values():
        assert list(old[name]) == list(today[name]) and not any(v != v for v in old[name])  # no NaN


def test_a_version_1_parquet_store_reads_and_exports_under_today_s_names(tmp_path):
    def write(path, dicts):
        w = ParquetRecordsWriter(path, row_group_records=4)
        for d in dicts:
            w.write_lines(json.dumps(d).encode() + b"\n", 1)
        w.close()
        (path / "manifest.json").write_text(json.dumps(rf.manifest(
            format_version=1, records_store={"format": "parquet", "format_version": 1})))

    (tmp_path / "v1").mkdir()
    write(tmp_path / "v1", records())
    # rewrite the parts' columns with the version-1 names, as that version stored them
    for part in sorted((tmp_path / "v1").glob("records-*.parquet")):
        table = pq.read_table(part)
        pq.write_table(table.rename_columns([{v: k for k, v in V1_RENAMED_FIELDS.items()}.get(c, c)
                                             for c in table.column_names]).replace_schema_metadata(
            table.schema.metadata), part)
    assert "sent_at" in pq.read_schema(next((tmp_path / "v1").glob("records-*.parquet"))).names
    run = load_run(tmp_path / "v1")
    assert list(run["sent_at_s"]) == [r["sent_at_s"] for r in records()]
    assert [r.scheduled_at_s for r in iter_records(tmp_path / "v1")] == [r["scheduled_at_s"] for r in records()]


def test_version_1_records_replay_as_a_trace(tmp_path):
    path = tmp_path / "old-records.jsonl"
    path.write_text("".join(json.dumps(as_v1(r)) + "\n" for r in records()))
    trace = load_trace(str(path))
    assert trace.format == "records" and len(trace.entries) == len(records())


def test_a_version_1_record_dict_becomes_a_record_after_upgrade():
    from tokenswarm.record import upgrade_v1

    rec = record_from_dict(upgrade_v1(as_v1(rf.record(3))))
    assert rec.sent_at_s == rf.record(3)["sent_at_s"]


def test_an_unknown_format_version_is_refused_naming_the_file(tmp_path):
    rf.write_run(tmp_path / "v4", records(), format_version=4)
    with pytest.raises(RunInputError, match=r"v4/manifest.json: unknown format_version 4; this tokenswarm reads format_version 1, 2, 3"):
        load_run(tmp_path / "v4")
