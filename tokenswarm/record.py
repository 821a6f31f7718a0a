"""The per-request record: the one thing that crosses from load generation to analysis.

A :class:`RequestRecord` is immutable and holds what was observed about one LLM call.
It is written as one JSON object per line (``records.jsonl``); the run's ``manifest.json``
carries :data:`FORMAT_VERSION`. Rules that every producer and consumer relies on:

* "Not observed" is ``None`` (JSON ``null``), never ``0``.
* Wall-clock fields (``scheduled_at``, ``sent_at``) are epoch seconds built from *one*
  wall-clock anchor per worker plus a monotonic offset, so they never jump.
* Durations are milliseconds measured on the monotonic clock (names end in ``_ms``).
* ``ttft_ms``, ``e2e_ms`` and ``chunk_offsets_ms`` count from ``sent_at`` (service view);
  ``schedule_lag_ms`` = ``sent_at - scheduled_at``, so the schedule-inclusive latency an
  open-loop user experiences is ``schedule_lag_ms + e2e_ms``.
* Failures are data: every call yields a record with an :class:`Outcome`.

Renaming or removing a field requires bumping :data:`FORMAT_VERSION`; adding an
optional field does not.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
from dataclasses import dataclass, field
from typing import Any, Iterable

import orjson

#: Version of the records/manifest format. Readers refuse versions they do not know.
FORMAT_VERSION = 1


class Outcome(str, enum.Enum):
    """How a request ended. Low-cardinality on purpose: it is a grouping key."""

    OK = "ok"  #: complete answer (``[DONE]`` or a finish reason was seen)
    HTTP_ERROR = "http_error"  #: non-2xx status or connection refused before a response
    STREAM_ERROR = "stream_error"  #: stream cut, malformed, or an error object inside it
    TIMEOUT = "timeout"  #: connect, first-token or total deadline passed
    CANCELLED = "cancelled"  #: stopped by the generator (end of run, user stopped)


OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One LLM request, as observed by the load generator. See the README's schema table."""

    run_id: str
    worker_id: str
    seq: int
    task: str
    user_class: str
    outcome: str
    request_key: str
    scheduled_at: float
    sent_at: float
    schedule_lag_ms: float | None = None
    session_id: str | None = None
    turn: int | None = None
    step: int | None = None
    phase: str | None = None
    api: str | None = None
    model: str | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    chunk_offsets_ms: list[float] | None = None
    chunk_tokens: list[int] | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tokens_estimated: bool = False
    finish_reason: str | None = None
    http_status: int | None = None
    error: str | None = None
    response_id: str | None = None
    output_sha256: str | None = None
    output_text: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    spec_decode: dict[str, Any] | None = None
    extra: dict[str, Any] | None = field(default=None)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of all fields (``None`` kept, so absent and unobserved differ)."""
        return dict(zip(FIELD_NAMES, _values(self)))

    def to_json(self) -> bytes:
        """One JSON object, no trailing newline (the fields in order, as :meth:`to_dict`)."""
        return orjson.dumps(self)  # orjson writes dataclasses natively, field by field

    def with_seq(self, seq: int) -> RequestRecord:
        """The same record with its sequence number set (records are immutable)."""
        values = _values(self)
        return RequestRecord(*values[:_SEQ], seq, *values[_SEQ + 1:])  # type: ignore[call-arg]  # mypy cannot count *args


_FIELDS = dataclasses.fields(RequestRecord)
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in _FIELDS)
# Once per request on the generator: one C call for all fields instead of a getattr each.
_values = operator.attrgetter(*FIELD_NAMES)
_SEQ = FIELD_NAMES.index("seq")
REQUIRED_FIELDS: tuple[str, ...] = tuple(
    f.name for f in _FIELDS if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


class RecordFormatError(ValueError):
    """A records line that is not a valid record; the message names the line and field."""


def record_from_dict(data: dict[str, Any], where: str = "record") -> RequestRecord:
    """Build a record from a decoded JSON object, ignoring unknown fields (forward compatible)."""
    missing = [name for name in REQUIRED_FIELDS if name not in data]
    if missing:
        raise RecordFormatError(f"{where}: missing required field(s) {', '.join(missing)}")
    if data["outcome"] not in OUTCOMES:
        raise RecordFormatError(f"{where}: field 'outcome' is {data['outcome']!r}, expected one of {OUTCOMES}")
    return RequestRecord(**{k: v for k, v in data.items() if k in _FIELD_SET})


_FIELD_SET = frozenset(FIELD_NAMES)


def encode_lines(records: Iterable[RequestRecord]) -> bytes:
    """JSON-lines bytes for a batch of records (each line ends with ``\\n``)."""
    return b"".join(r.to_json() + b"\n" for r in records)
