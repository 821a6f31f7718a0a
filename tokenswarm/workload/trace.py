"""Request traces for replay: parse Mooncake JSONL, BurstGPT CSV and tokenswarm records (pure).

Formats (detected from the first non-empty line, or named by ``load.trace_format``):

* ``mooncake`` - JSON lines ``{"timestamp": ms, "input_length": n, "output_length": m,
  "hash_ids": [...]}`` (Mooncake's published traces; ``timestamp`` in milliseconds).
  ``hash_ids`` name the prompt's blocks of ``block_tokens`` tokens (512 in Mooncake's traces):
  requests that share leading ids share that prefix.
* ``burstgpt`` - CSV with a header holding ``Timestamp`` (seconds), ``Request tokens`` and
  ``Response tokens`` (BurstGPT's columns; others such as ``Model`` and ``Log Type`` are ignored).
* ``records`` - tokenswarm's ``records.jsonl``: ``scheduled_at_s`` (epoch s), ``prompt_tokens``
  and ``output_tokens`` (else ``max_tokens``) and ``task``. Records whose prompt length was not
  observed (failed before an answer) cannot be replayed and are skipped (counted).

Timestamps become offsets from the trace's first request; entries are sorted by them (stable).
Every malformed line raises :class:`TraceError` naming the file and the line.
"""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tokenswarm.record import upgrade_v1

TRACE_FORMATS = ("auto", "mooncake", "burstgpt", "records")


class TraceError(ValueError):
    """A trace that cannot be replayed; ``str(e)`` names the file and, for a bad line, the line."""


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One request of a trace."""

    offset_s: float  #: seconds after the trace's first request (before ``load.speed``)
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None  #: prompt blocks (Mooncake), shared across requests
    task: str | None = None  #: the recorded task (tokenswarm records)
    line: int = 0


@dataclass(frozen=True)
class Trace:
    path: str
    format: str
    entries: tuple[TraceEntry, ...]
    skipped_count: int = 0  #: records without an observed prompt length

    @property
    def span_s(self) -> float:
        return self.entries[-1].offset_s if self.entries else 0.0


def detect_format(path: str) -> str:
    """``mooncake``, ``burstgpt`` or ``records`` from the first non-empty line of ``path``."""
    with open(path, "rb") as fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            if line.startswith(b"{"):
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    raise TraceError(f"{path}:1: not a JSON object (cannot detect the trace format)") from None
                if isinstance(obj, dict) and "input_length" in obj:
                    return "mooncake"
                if isinstance(obj, dict) and "request_key" in obj and ("scheduled_at_s" in obj or "scheduled_at" in obj):
                    return "records"  # scheduled_at: a record of format_version 1
                raise TraceError(f"{path}: JSON lines with neither input_length (Mooncake) nor "
                                 "request_key/scheduled_at_s (tokenswarm records); set load.trace_format")
            if b"Timestamp" in line and b"Request tokens" in line:
                return "burstgpt"
            raise TraceError(f"{path}: unknown trace format (expected Mooncake JSONL, a BurstGPT CSV header "
                             "or tokenswarm records); set load.trace_format")
    raise TraceError(f"{path}: the trace is empty")


@functools.lru_cache(maxsize=4)
def load_trace(path: str, fmt: str = "auto") -> Trace:
    """Parse a whole trace (cached per path and format). Raises :class:`TraceError`."""
    try:
        if fmt == "auto":
            fmt = detect_format(path)
        if fmt not in TRACE_FORMATS:
            raise TraceError(f"{path}: trace_format {fmt!r}: expected one of {', '.join(TRACE_FORMATS)}")
        text = Path(path).read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror or exc})") from None
    parse = {"mooncake": _mooncake, "burstgpt": _burstgpt, "records": _records}[fmt]
    raw, skipped = parse(path, text)
    if not raw:
        raise TraceError(f"{path}: no replayable request in the trace")
    t0 = min(t for t, _ in raw)
    entries = sorted((TraceEntry(round(t - t0, 6), *rest) for t, rest in raw), key=lambda e: e.offset_s)
    return Trace(path, fmt, tuple(entries), skipped)


def _bad(path: str, lineno: int, what: str) -> TraceError:
    return TraceError(f"{path}:{lineno}: {what}")


def _int_field(obj: dict[str, Any], name: str, path: str, lineno: int, minimum: int) -> int:
    v = obj.get(name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < minimum:
        raise _bad(path, lineno, f"field '{name}' must be an integer >= {minimum}, got {v!r}")
    return int(v)


def _time_field(obj: dict[str, Any], name: str, path: str, lineno: int) -> float:
    v = obj.get(name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0:
        raise _bad(path, lineno, f"field '{name}' must be a number >= 0, got {v!r}")
    return float(v)


def _json_lines(path: str, text: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _bad(path, lineno, f"invalid JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise _bad(path, lineno, "expected a JSON object")
        yield lineno, obj


def _mooncake(path: str, text: bytes) -> tuple[list[tuple[float, tuple[Any, ...]]], int]:
    out = []
    for lineno, obj in _json_lines(path, text):
        t = _time_field(obj, "timestamp", path, lineno) / 1000.0  # Mooncake: milliseconds
        n_in = _int_field(obj, "input_length", path, lineno, 1)
        n_out = _int_field(obj, "output_length", path, lineno, 1)
        ids = obj.get("hash_ids")
        if ids is not None and (not isinstance(ids, list)
                                or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
            raise _bad(path, lineno, f"field 'hash_ids' must be a list of integers, got {ids!r}")
        out.append((t, (n_in, n_out, tuple(ids) if ids else None, None, lineno)))
    return out, 0


def _burstgpt(path: str, text: bytes) -> tuple[list[tuple[float, tuple[Any, ...]]], int]:
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not UTF-8 text") from None
    reader = csv.reader(io.StringIO(decoded))
    header = next(reader, None)
    cols = {name.strip(): i for i, name in enumerate(header or [])}
    missing = [c for c in ("Timestamp", "Request tokens", "Response tokens") if c not in cols]
    if missing:
        raise _bad(path, 1, f"CSV header lacks column(s) {', '.join(missing)}")
    it, ir, io_ = cols["Timestamp"], cols["Request tokens"], cols["Response tokens"]
    out = []
    for lineno, row in enumerate(reader, 2):
        if not row or not any(c.strip() for c in row):
            continue
        try:
            t = float(row[it])
            n_in = int(float(row[ir]))
            n_out = int(float(row[io_]))
        except (ValueError, IndexError):
            raise _bad(path, lineno, f"expected numbers in Timestamp, Request tokens, Response tokens, got {row!r}"
                       ) from None
        if t != t or t < 0 or n_in < 1 or n_out < 0:
            raise _bad(path, lineno, f"Timestamp must be >= 0, Request tokens >= 1, Response tokens >= 0, got {row!r}")
        # BurstGPT logs failed requests with 0 response tokens: replayed with max_tokens 1
        out.append((t, (n_in, max(1, n_out), None, None, lineno)))
    return out, 0


def _records(path: str, text: bytes) -> tuple[list[tuple[float, tuple[Any, ...]]], int]:
    out = []
    skipped = 0
    for lineno, obj in _json_lines(path, text):
        upgrade_v1(obj)  # records of format_version 1 (scheduled_at without its unit) replay too
        t = _time_field(obj, "scheduled_at_s", path, lineno)
        if obj.get("prompt_tokens") is None:
            skipped += 1
            continue
        n_in = _int_field(obj, "prompt_tokens", path, lineno, 1)
        name = "output_tokens" if obj.get("output_tokens") else "max_tokens"
        n_out = _int_field(obj, name, path, lineno, 1)
        task = obj.get("task")
        out.append((t, (n_in, n_out, None, task if isinstance(task, str) else None, lineno)))
    return out, skipped
