"""The per-request record: the one thing that crosses from load generation to analysis.

A :class:`RequestRecord` is immutable and holds what was observed about one LLM call.
It is written as one JSON object per line (``records.jsonl``); the run's ``manifest.json``
carries :data:`FORMAT_VERSION`. Rules that every producer and consumer relies on:

* "Not observed" is ``None`` (JSON ``null``), never ``0``.
* Wall-clock fields (``scheduled_at_s``, ``sent_at_s``) are epoch seconds built from *one*
  wall-clock anchor per worker plus a monotonic offset, so they never jump.
* Durations are milliseconds measured on the monotonic clock (names end in ``_ms``).
* ``sent_at_s`` is the moment the request's last byte was handed to the kernel (one clock
  reading); ``ttft_ms``, ``headers_ms``, ``e2e_ms`` and ``chunk_offsets_ms`` count from it
  (service view). ``schedule_lag_ms`` is computed from the same reading:
  ``schedule_lag_ms == (sent_at_s - scheduled_at_s) * 1000``, so the schedule-inclusive latency an
  open-loop user experiences is ``schedule_lag_ms + e2e_ms``. What the server did not cause
  has its own fields: ``connect_ms`` (a new connection) and ``send_delay_ms`` (the
  generator's own delay, ``schedule_lag_ms - connect_ms``).
* Failures are data: every call yields a record with an :class:`Outcome`.

Renaming or removing a field requires bumping :data:`FORMAT_VERSION`; adding an
optional field does not. Readers accept every version in :data:`READABLE_FORMAT_VERSIONS`:
version 1 differs from 2 only in two names (:data:`V1_RENAMED_FIELDS`), which
:func:`upgrade_v1` maps. Version 3 changed no record field: the manifest's scenario echo names
a class's requested lengths ``max_tokens`` (version 2: ``output_tokens``, the name of the
record's observed length; :func:`tokenswarm.manifest.upgrade_v2_scenario` maps it).
"""

from __future__ import annotations

import dataclasses
import enum
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import orjson

#: Version of the records/manifest format. Readers refuse versions they do not know.
FORMAT_VERSION = 3
#: Versions the readers accept (version 1: the same record, two fields without their unit;
#: version 2: the scenario echo's requested lengths named output_tokens).
READABLE_FORMAT_VERSIONS = (1, 2, 3)
#: Version-1 name -> current name. Version 2 gave the two wall-clock fields their unit.
V1_RENAMED_FIELDS = {"scheduled_at": "scheduled_at_s", "sent_at": "sent_at_s"}


def upgrade_v1(obj: dict[str, Any]) -> dict[str, Any]:
    """A version-1 record dict with its fields under their current names (in place, returned)."""
    for old, new in V1_RENAMED_FIELDS.items():
        if old in obj:
            obj[new] = obj.pop(old)
    return obj

#: ``seq`` of a record built but not yet emitted (emit gives it its number).
UNNUMBERED = -1

#: The most tokens one request can plausibly count (prompt or output). The generator refuses a
#: server's larger number as a stream error, the analysis refuses a record holding one: no model
#: has a context near it, and every count must fit the record's 64-bit integers with room.
MAX_PLAUSIBLE_TOKENS = 100_000_000


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
    """One LLM request, as observed by the load generator. Fields: :data:`FIELD_DOCS` (docs/reference/record-fields.md)."""

    run_id: str
    worker_id: str
    seq: int
    task: str
    user_class: str
    outcome: str
    request_key: str
    scheduled_at_s: float
    sent_at_s: float
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
    # Request phases (optional and appended, so records written before them still read).
    conn_reused: bool | None = None
    connect_ms: float | None = None
    send_delay_ms: float | None = None
    headers_ms: float | None = None
    #: ``chunk_tokens`` were not sent by the server but proven: as many content events as
    #: ``usage.completion_tokens``, so one token per event (glossary: tokens_per_chunk)
    chunk_tokens_inferred: bool = False
    #: extraction: the answer parses as JSON / validates against the requested JSON Schema
    json_valid: bool | None = None
    schema_valid: bool | None = None
    #: reasoning streams (None for plain ones): offsets from sent_at_s of the first reasoning and
    #: the first answer chunk (ttft_ms stays "first chunk of any kind"), chunks and tokens per kind
    first_reasoning_token_ms: float | None = None
    first_answer_token_ms: float | None = None
    reasoning_chunks: int | None = None
    answer_chunks: int | None = None
    reasoning_tokens: int | None = None
    #: diagnostic: the application's own reading of the end (e2e_ms of a complete answer is
    #: dated by the stream's last delivery, from the same kernel stamps as its chunks)
    e2e_app_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of all fields (``None`` kept, so absent and unobserved differ)."""
        return dict(zip(FIELD_NAMES, _values(self)))

    def to_json(self) -> bytes:
        """One JSON object, no trailing newline (the fields in order, as :meth:`to_dict`)."""
        return orjson.dumps(self)  # orjson writes dataclasses natively, field by field

    def numbered(self, seq: int) -> RequestRecord:
        """The record with its sequence number set: in place while it is still :data:`UNNUMBERED`.

        A record leaves :meth:`~tokenswarm.load.context.RunContext.emit` numbered, so one that
        is still unnumbered there was just built and nobody has seen it yet: setting the field
        on it saves copying ~50 fields per request. A numbered one is copied (:meth:`with_seq`).
        """
        if self.seq != UNNUMBERED:
            return self.with_seq(seq)
        object.__setattr__(self, "seq", seq)
        return self

    def with_seq(self, seq: int) -> RequestRecord:
        """The same record with its sequence number set (records are immutable)."""
        values = _values(self)
        return RequestRecord(*values[:_SEQ], seq, *values[_SEQ + 1:])  # type: ignore[call-arg]  # mypy cannot count *args


@dataclass(frozen=True, slots=True)
class RecordIdentity:
    """Who sent a request, for what, and when it was due: the record fields known before sending.

    Made once per request by :meth:`tokenswarm.load.context.RunContext.base`; the client adds
    what it measures and builds the :class:`RequestRecord` from both. The names are the
    record's own fields (a test checks), and ``seq`` stays ``-1`` until the record is emitted.
    ``schedule_lag_ms`` is ``None`` here (not observed before the send): the client sets it
    from the send's own clock reading.

    It also reads as a ``Mapping`` (``identity["task"]``): the streaming hooks hand it to
    listeners as ``base``, documented that way (docs/hooks.md); the client builds the record
    from :meth:`record_fields`.
    """

    run_id: str
    worker_id: str
    task: str
    user_class: str
    request_key: str
    scheduled_at_s: float  # epoch seconds
    seq: int = -1
    schedule_lag_ms: float | None = None
    session_id: str | None = None
    turn: int | None = None
    step: int | None = None
    phase: str | None = None
    api: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    extra: dict[str, Any] | None = None

    def record_fields(self) -> dict[str, Any]:
        """The identity as keyword arguments of :class:`RequestRecord`."""
        return {name: getattr(self, name) for name in IDENTITY_FIELDS}

    # -- the Mapping protocol, for ``**identity`` and ``identity[name]`` ------------------------
    def keys(self) -> tuple[str, ...]:
        return IDENTITY_FIELDS

    def __getitem__(self, name: str) -> Any:
        if name not in _IDENTITY_SET:
            raise KeyError(name)
        return getattr(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name) if name in _IDENTITY_SET else default


#: The fields of :class:`RecordIdentity`, in order (all of them are :class:`RequestRecord` fields).
IDENTITY_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RecordIdentity))
_IDENTITY_SET = frozenset(IDENTITY_FIELDS)


#: What every record field means, one entry per field of :class:`RequestRecord` (a test
#: checks that they match). The manual's record table is generated from it.
FIELD_DOCS: dict[str, str] = {
    "run_id": "The run this request belongs to.",
    "worker_id": "The worker process that sent it.",
    "seq": "Per-worker sequence number (0, 1, 2, ... without gaps), so lost records are detected.",
    "task": "The traffic class: `qa`, `summarization`, `code`, `multi_turn` or a scenario-defined name.",
    "user_class": "The Locust user class that sent it.",
    "outcome": "How the request ended: `ok`, `http_error`, `stream_error`, `timeout` or `cancelled`.",
    "request_key": "sha256 of what was sent (messages or prompt, `max_tokens`, sampling parameters; not the model name), so two runs of the same scenario and seed join request by request.",
    "scheduled_at_s": "Epoch seconds when the request was due: the user's turn began (closed loop) or its scheduled arrival (open loop).",
    "sent_at_s": "Epoch seconds when the request's last byte was handed to the kernel; for a request never sent whole (connection failed), when the attempt began.",
    "schedule_lag_ms": "sent_at_s minus scheduled_at_s, in ms, from the same clock reading as sent_at_s.",
    "session_id": "The multi-turn conversation (null for single-shot requests).",
    "turn": "0-based turn within the conversation (null for single-shot requests).",
    "step": "Index into the manifest's `steps` of the load step the request started in.",
    "phase": "Phase of the step when it was sent: warmup or steady (or ramp).",
    "api": "The API called: `chat` or `completions`.",
    "model": "The model name asked for.",
    "ttft_ms": "Time to first token: arrival of the first content chunk minus sent_at_s.",
    "e2e_ms": "End of the response minus sent_at_s: for a complete answer, the arrival of the stream's last delivery (the read that brought [DONE] or the last event, dated like its chunks, by the kernel's receive stamp where there is one); for a failed, cut or timed-out request, when the generator saw it end (error or deadline).",
    "chunk_offsets_ms": "Arrival of each content chunk, ms after sent_at_s (chunks read together share one value).",
    "chunk_tokens": "Tokens in each content chunk, from the server's cumulative usage (`continuous_usage_stats`) or token ids; null when the server does not say (never guessed from text).",
    "prompt_tokens": "Prompt tokens, from the server's `usage` (an estimate when `tokens_estimated`).",
    "output_tokens": "Output tokens: the server's usage, else the sum of chunk_tokens, else an estimate.",
    "tokens_estimated": "True when the server sent no usage and the token counts are estimated (4 characters per token).",
    "finish_reason": "The server's finish reason: `stop`, `length`, ...",
    "http_status": "The HTTP status code (null when no response arrived).",
    "error": "Short error text, e.g. `HTTP 429: RateLimitError: ...`, `first_token timeout`, `connection closed mid-stream`.",
    "response_id": "The server's response `id` (joins the simulator's ground-truth log or server logs).",
    "output_sha256": "sha256 of the generated text.",
    "output_text": "The generated text itself, when the scenario sets `traffic.keep_outputs`.",
    "max_tokens": "The `max_tokens` asked for.",
    "temperature": "The sampling temperature asked for.",
    "spec_decode": "Per-request speculative-decoding statistics when the server sends them (vLLM `metrics.speculative_decoding`).",
    "extra": "Free-form details, e.g. the abnormal case that was sent.",
    "conn_reused": "True when the request went out on a kept-alive connection, false on a new one; null when no connection was obtained.",
    "connect_ms": "Time to establish the request's new connection (TCP, plus TLS); for a connection that failed, the time until it failed; null when the connection was reused.",
    "send_delay_ms": "The generator's own delay: from the moment the request was due to the moment its last byte was handed to the kernel, minus connect_ms; null when never sent.",
    "headers_ms": "Response headers received (time to first byte), ms after sent_at_s.",
    "chunk_tokens_inferred": "True when chunk_tokens were not sent by the server but proven: as many content events as usage.completion_tokens, so one token per event.",
    "json_valid": "Extraction: the answer parses as JSON (one surrounding Markdown code fence allowed); null when not checked (other tasks, failed requests).",
    "schema_valid": "Extraction: the answer validates against the JSON Schema the request asked for (JSON Schema draft 2020-12, checked with jsonschema-rs); null when not checked.",
    "first_reasoning_token_ms": "Reasoning streams: arrival of the first reasoning_content/reasoning chunk, ms after sent_at_s; null for a stream without reasoning.",
    "first_answer_token_ms": "Reasoning streams: arrival of the first answer (content) chunk, ms after sent_at_s (ttft_ms stays the first chunk of any kind); null without reasoning or without an answer.",
    "reasoning_chunks": "Reasoning streams: content chunks that carried reasoning (they come first: chunk i is reasoning iff i < reasoning_chunks).",
    "answer_chunks": "Reasoning streams: content chunks that carried the answer.",
    "reasoning_tokens": "Reasoning streams: usage.completion_tokens_details.reasoning_tokens when the server sends it, else the exact per-chunk counts of the reasoning chunks; null when unknown.",
    "e2e_app_ms": "Diagnostic: when the generator's own code saw the response end (its clock after the read loop returned), ms after sent_at_s; e2e_app_ms - e2e_ms is how late the generator got to the end of a complete answer. Null in records written before it existed.",
}

_FIELDS = dataclasses.fields(RequestRecord)
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in _FIELDS)
# Once per request on the generator: one C call for all fields instead of a getattr each.
_values = operator.attrgetter(*FIELD_NAMES)
_SEQ = FIELD_NAMES.index("seq")
REQUIRED_FIELDS: tuple[str, ...] = tuple(
    f.name for f in _FIELDS if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


_REQUIRED: Any = object()  # a field without a default, in :data:`_SLOT_SETTERS`
if any(f.default_factory is not dataclasses.MISSING for f in _FIELDS):  # build_record has no factories
    raise TypeError("RequestRecord: a field with a default_factory needs build_record to call it")
#: (name, the slot's setter, default) of each field in order: what :func:`build_record` walks.
_SLOT_SETTERS: tuple[tuple[str, Any, Any], ...] = tuple(
    (f.name, RequestRecord.__dict__[f.name].__set__, _REQUIRED if f.name in REQUIRED_FIELDS else f.default)
    for f in _FIELDS
)
_new = object.__new__


#: The C builder (``tokenswarm.wire._fastread.build_record``), installed by
#: :mod:`tokenswarm.wire.native` when the extension is built: this module sits below the wire
#: and cannot import it. It returns None for anything but a complete, valid record.
_native_build: Callable[[dict[str, Any], RecordIdentity | None], RequestRecord | None] | None = None


def use_native_builder(bind: Callable[..., bool] | None, build: Callable[..., RequestRecord | None] | None) -> bool:
    """Build records with the extension's ``build`` once ``bind`` has taken this module's field
    table (True), or in Python again (``None``, or when ``bind`` declines the classes)."""
    global _native_build
    _native_build = None
    if bind is None or build is None:
        return False
    defaults = tuple(default for _name, _put, default in _SLOT_SETTERS)
    if not bind(RequestRecord, FIELD_NAMES, defaults, _REQUIRED, RecordIdentity, IDENTITY_FIELDS):
        return False
    _native_build = build
    return True


def build_record(fields: dict[str, Any], identity: RecordIdentity | None = None) -> RequestRecord:
    """``RequestRecord(**identity.record_fields(), **fields)``, built faster; ``fields`` may be
    consumed (left empty).

    The generator builds one record per request. The frozen dataclass's ``__init__`` parses ~46
    keywords and sets each field through ``object.__setattr__`` (~11 us); this sets the slots
    through their descriptors (~6 us), or by offset in C (~1 us). A missing required field or an
    unknown one is the same ``TypeError`` the constructor raises.
    """
    if _native_build is not None:
        built = _native_build(fields, identity)
        if built is not None:
            return built
    if identity is not None:
        fields = {**identity.record_fields(), **fields}
    record = _new(RequestRecord)
    take = fields.pop
    for name, put, default in _SLOT_SETTERS:
        value = take(name, default)
        if value is _REQUIRED:
            raise TypeError(f"RequestRecord: missing required field {name!r}")
        put(record, value)
    if fields:
        raise TypeError(f"RequestRecord: unknown field(s) {', '.join(sorted(fields))}")
    return record


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


