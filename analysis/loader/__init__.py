"""Read a run directory (CONTRACTS.md section 1) into columnar numpy arrays.

This is the only package of the computing core that touches files. It streams
``records.jsonl`` (plain, ``.gz`` or rotated ``records-*.jsonl[.gz]``) line by line with
orjson and converts every few thousand records into numpy arrays, so memory is a few dozen
bytes per request plus ~6 bytes per streamed chunk, never one Python object per record.

Chunk lists are kept in CSR layout as the *gaps* between consecutive chunks of one request:
request ``i`` owns ``gap_ms[gap_ptr[i]:gap_ptr[i+1]]`` (``n_chunks[i] - 1`` values, float32,
computed in float64 from the recorded offsets before narrowing, so each gap keeps ~7
significant digits) and ``gap_tokens`` holds the token count of the chunk that *ends* each gap.
The first chunk's offset and token count and the last chunk's offset are per-request columns.
Everything the glossary derives from chunk lists (ITL, inter-chunk gaps, tokens per chunk)
is a function of these.

Layout: ``lines`` (block-wise line and JSON reading, truncated-tail tolerance), ``records``
(records into columns), ``server_metrics`` (Prometheus scrapes) and ``run`` (manifest, records
files, :func:`load_run`). Import from this package.
"""

from __future__ import annotations

from tokenswarm.analysis.loader.records import (
    BATCH_RECORDS,
    CATEGORICAL_FIELDS,
    FLOAT_FIELDS,
    SPEC_FIELDS,
    read_records,
)
from tokenswarm.analysis.loader.run import Run, load_run, read_manifest, record_files, run_from_records
from tokenswarm.analysis.loader.server_metrics import ServerMetrics, read_server_metrics

__all__ = [
    "BATCH_RECORDS",
    "CATEGORICAL_FIELDS",
    "FLOAT_FIELDS",
    "SPEC_FIELDS",
    "Run",
    "ServerMetrics",
    "load_run",
    "read_manifest",
    "read_records",
    "read_server_metrics",
    "record_files",
    "run_from_records",
]
