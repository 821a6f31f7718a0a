"""Columnar records store: Apache Parquet parts written in row groups as batches arrive.

:class:`ParquetRecordsWriter` has the interface of
:class:`~tokenswarm.collect.writer.RecordsWriter` (``write_lines(data, count)``, ``flush()``,
``close()``, ``records_written``, ``bytes_written``, ``paths``): the master appends the JSON
lines workers sent, and the writer turns them into Arrow columns one row group at a time.

Crash safety. A Parquet file is readable only once its footer is written, so every row group
is written as its own complete part, ``records-NNNNNN.parquet``, first to a ``.tmp`` name and
then renamed: a run killed at any moment keeps every part it finished and never leaves a
half file under a ``.parquet`` name. A row group is cut when ``row_group_records`` records are
buffered, or at a periodic ``flush()`` once the oldest buffered record is ``max_age_s`` old,
and at ``close()``; so a kill loses at most that age of records.

Schema. :func:`arrow_schema` derives one column per :class:`~tokenswarm.record.RequestRecord`
field from the dataclass's type hints, so fields others add need no edit here: ``str`` ->
string, ``int`` -> int64, ``float`` -> float64, ``bool`` -> bool, ``list[float]`` ->
list<float64>, ``list[int]`` -> list<int32>, anything else (``dict`` fields such as
``spec_decode``, ``extra``) -> its JSON text. Every column is nullable: ``None`` stays null.
The store's version is :data:`STORE_FORMAT_VERSION` in the file metadata (and the run
manifest's ``records_store``); the record's own version is the manifest ``format_version``.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import time
import types
import typing
from pathlib import Path
from typing import Any, Callable, Union

import orjson
import pyarrow as pa
import pyarrow.json as pajson
import pyarrow.parquet as pq

from tokenswarm.collect.store import (  # noqa: F401 (re-exported: the store's names live there)
    PARTS_GLOB,
    REJECTED_NAME,
    SOAK_MIN_S,
    STORE_FORMAT_VERSION,
    StoreFormatError,
    choose_format,
    store_parts,
)
from tokenswarm.record import FIELD_NAMES, FORMAT_VERSION, V1_RENAMED_FIELDS, RequestRecord, upgrade_v1

log = logging.getLogger("tokenswarm")

#: Metadata keys written into every part's schema.
META_STORE_VERSION = b"tokenswarm.store_format_version"
META_RECORD_VERSION = b"tokenswarm.record_format_version"


def _arrow_type(hint: Any) -> tuple[pa.DataType, bool]:
    """Arrow type of one field's type hint, and whether values are stored as JSON text."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return _arrow_type(args[0])
        return pa.string(), True
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        if item is float:
            return pa.list_(pa.float64()), False
        if item is int:
            return pa.list_(pa.int32()), False  # per-chunk token counts: 32 bits are plenty
        if item is str:
            return pa.list_(pa.string()), False
        return pa.string(), True
    simple = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
    if hint in simple:
        return simple[hint], False
    return pa.string(), True


def _field_types() -> dict[str, tuple[pa.DataType, bool]]:
    hints = typing.get_type_hints(RequestRecord)
    return {f.name: _arrow_type(hints[f.name]) for f in dataclasses.fields(RequestRecord)}


_TYPES = _field_types()
#: Fields stored as JSON text (values that are not plain scalars or lists of them).
JSON_FIELDS: tuple[str, ...] = tuple(name for name, (_, js) in _TYPES.items() if js)


def arrow_schema() -> pa.Schema:
    """The Arrow schema of a records part: every record field, in record order, nullable."""
    meta = {META_STORE_VERSION: str(STORE_FORMAT_VERSION).encode(), META_RECORD_VERSION: str(FORMAT_VERSION).encode()}
    return pa.schema([pa.field(name, _TYPES[name][0], nullable=True) for name in FIELD_NAMES], metadata=meta)


SCHEMA = arrow_schema()


def records_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Decoded record dicts as one Arrow table of :data:`SCHEMA` (missing fields are null)."""
    cols = [records_table_column(f, [r.get(f.name) for r in rows]) for f in SCHEMA]
    return pa.Table.from_arrays(cols, schema=SCHEMA)


_SCALAR_SCHEMA = pa.schema([f for f in SCHEMA if f.name not in JSON_FIELDS])
_JSON_PARSE = pajson.ParseOptions(explicit_schema=_SCALAR_SCHEMA, unexpected_field_behavior="ignore")


def lines_table(data: bytes) -> pa.Table:
    """JSON record lines as one table of :data:`SCHEMA`.

    Arrow's C++ JSON reader converts the typed columns (about twice as fast as decoding every
    line in Python); the JSON-text fields are taken from the few lines that carry a value. If
    the reader refuses the batch, the line-by-line path decides (and names a bad field).
    """
    try:
        typed = pajson.read_json(io.BytesIO(data), parse_options=_JSON_PARSE,
                                 read_options=pajson.ReadOptions(use_threads=False, block_size=len(data) + 1))
    except pa.ArrowInvalid:
        return records_table([orjson.loads(line) for line in data.split(b"\n") if line.strip()])
    lines = [line for line in data.split(b"\n") if line.strip()]
    if len(lines) != typed.num_rows:
        return records_table([orjson.loads(line) for line in lines])
    cols = {name: typed.column(name) for name in typed.column_names}
    for name in JSON_FIELDS:
        key, null = f'"{name}":'.encode(), f'"{name}":null'.encode()
        values: list[Any] = [None] * len(lines)
        for i, line in enumerate(lines):
            if key in line and null not in line:
                values[i] = orjson.loads(line).get(name)
        cols[name] = records_table_column(SCHEMA.field(name), values)
    return pa.Table.from_arrays([cols[f.name] for f in SCHEMA], schema=SCHEMA)


def records_table_column(f: pa.Field, values: list[Any]) -> pa.Array:
    """One column of :func:`records_table` (JSON-text fields are encoded here)."""
    if f.name in JSON_FIELDS:
        dumps = orjson.dumps
        values = [None if v is None else dumps(v).decode() for v in values]
    return pa.array(values, type=f.type)


class ParquetRecordsWriter:
    """Writes ``records-NNNNNN.parquet`` parts, one row group each (see the module docstring).

    ``clock`` (monotonic seconds) is injected so the age rule is tested without sleeping.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, row_group_records: int = 65536, max_age_s: float = 60.0,
                 compression: str = "lz4", clock: Callable[[], float] = time.monotonic) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.row_group_records = row_group_records
        self.max_age_s = max_age_s
        self.compression = compression
        self.clock = clock
        self._lines: list[bytes] = []
        self._buffered = 0
        self._oldest: float | None = None
        existing = sorted(self.run_dir.glob(PARTS_GLOB))
        self._part = len(existing)  # a reopened run directory appends after its parts
        self.records_written = 0
        self.bytes_written = 0
        self.paths: list[Path] = []

    def write_lines(self, data: bytes, count: int) -> None:
        """Queue ``count`` newline-terminated JSON records (as :class:`RecordsWriter` takes them)."""
        if not data:
            return
        if self._oldest is None:
            self._oldest = self.clock()
        self._lines.append(data)
        self._buffered += count
        self.records_written += count
        if self._buffered >= self.row_group_records:
            self._write_group()

    def flush(self) -> None:
        """Periodic call: cut a row group once the oldest buffered record is ``max_age_s`` old."""
        if self._oldest is not None and self.clock() - self._oldest >= self.max_age_s:
            self._write_group()

    def close(self) -> None:
        """Write what is buffered (the last row group)."""
        self._write_group()

    def _write_group(self) -> None:
        if not self._lines:
            return
        data = b"".join(self._lines)
        self._lines, self._buffered, self._oldest = [], 0, None
        try:
            table = lines_table(data)
        except (orjson.JSONDecodeError, pa.ArrowException, TypeError, ValueError) as exc:
            self._reject(data, exc)
            return
        self._part += 1
        path = write_part(table, self.run_dir, self._part, self.compression)
        self.paths.append(path)
        self.bytes_written += path.stat().st_size


    def _reject(self, data: bytes, exc: BaseException) -> None:
        """A batch that does not fit the schema: keep its lines as JSON, say which field failed."""
        path = self.run_dir / REJECTED_NAME
        with open(path, "ab") as fh:
            fh.write(data if data.endswith(b"\n") else data + b"\n")
        self.paths.append(path)
        log.error("tokenswarm: %d record line(s) do not fit the records schema (%s); kept as JSON lines in %s",
                  data.count(b"\n"), _which_field(data) or exc, path)


def _which_field(data: bytes) -> str | None:
    """Name the first record line and field that cannot be converted (for the error message)."""
    for lineno, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            return f"line {lineno} of the batch is not JSON"
        for f in SCHEMA:
            try:
                records_table_column(f, [row.get(f.name)])
            except (pa.ArrowException, TypeError, ValueError):
                return f"line {lineno} of the batch: field {f.name!r} = {row.get(f.name)!r} is not {f.type}"
    return None


#: Low-cardinality columns worth dictionary encoding (names that are not fields are ignored).
_DICTIONARY_COLUMNS = [n for n in ("run_id", "worker_id", "task", "user_class", "outcome", "phase", "api", "model",
                                   "finish_reason", "error") if n in FIELD_NAMES]
#: Min/max statistics where they help a query engine skip row groups.
_STATS_COLUMNS = [n for n in ("seq", "scheduled_at_s", "sent_at_s", "step", "ttft_ms", "e2e_ms") if n in FIELD_NAMES]


def write_part(table: pa.Table, run_dir: Path, number: int, compression: str = "lz4") -> Path:
    """Write ``table`` as part ``number`` (one row group), via a ``.tmp`` name so it appears whole."""
    path = run_dir / f"records-{number:06d}.parquet"
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression=compression, row_group_size=max(table.num_rows, 1),
                   use_dictionary=_DICTIONARY_COLUMNS, write_statistics=_STATS_COLUMNS)
    os.replace(tmp, path)
    return path


def write_records(run_dir: str | os.PathLike[str], records: list[RequestRecord], **kw: Any) -> ParquetRecordsWriter:
    """Write records to a run directory's Parquet store in one go (tests, export, tools)."""
    w = ParquetRecordsWriter(run_dir, **kw)
    w.write_lines(b"".join(r.to_json() + b"\n" for r in records), len(records))
    w.close()
    return w


def check_part(path: Path, schema: pa.Schema) -> None:
    """Refuse a part written by an unknown store version (the message names the file)."""
    meta = schema.metadata or {}
    version = meta.get(META_STORE_VERSION)
    if version is None or int(version) != STORE_FORMAT_VERSION:
        raise StoreFormatError(f"{path}: records store format_version {version and version.decode()!r}; "
                               f"this version reads {STORE_FORMAT_VERSION}")


def stored_names(schema: pa.Schema) -> dict[str, str]:
    """Record field -> its column in a part: a part written with record format_version 1 names
    the two wall-clock fields without their unit (:data:`tokenswarm.record.V1_RENAMED_FIELDS`)."""
    names = schema.names
    out = {n: n for n in names}
    for old, new in V1_RENAMED_FIELDS.items():
        if old in out and new not in out:
            out[new] = out.pop(old)
    return out


def current_names(table: pa.Table) -> pa.Table:
    """``table`` with version-1 column names renamed to today's (unchanged when there are none)."""
    names = table.column_names
    if not any(n in V1_RENAMED_FIELDS for n in names):
        return table
    return table.rename_columns([V1_RENAMED_FIELDS.get(n, n) for n in names])


def iter_records(run_dir: str | os.PathLike[str], batch_rows: int = 8192) -> typing.Iterator[RequestRecord]:
    """Every record of a Parquet store, part by part and batch by batch (export, tests)."""
    parts, _ = store_parts(run_dir)
    loads = orjson.loads
    for path in parts:
        pf = pq.ParquetFile(path)
        check_part(path, pf.schema_arrow)
        stored = stored_names(pf.schema_arrow)
        names = [stored[n] for n in stored if n in _FIELD_SET]
        for batch in pf.iter_batches(batch_size=batch_rows, columns=names):
            for row in batch.to_pylist():
                upgrade_v1(row)
                for name in JSON_FIELDS:
                    v = row.get(name)
                    if v is not None:
                        row[name] = loads(v)
                yield RequestRecord(**row)


_FIELD_SET = frozenset(FIELD_NAMES)
