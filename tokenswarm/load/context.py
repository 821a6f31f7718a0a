"""Per-process run state shared by the users of one Locust process (local, master or worker).

It owns the wall-clock anchor, the gap-free sequence counter, the current load step, the
record sink, the live statistics and the prompt sources. Users read it; the plugin
(``tokenswarm.orchestrate.plugin``) creates it at test start and tears it down at test stop.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
import socket
import time
from typing import Any, Callable
from urllib.parse import urlsplit

import orjson

from tokenswarm.load.livestats import LiveStats
from tokenswarm.record import RecordIdentity, RequestRecord
from tokenswarm.wire.auth import split_userinfo, target_headers
from tokenswarm.wire.clock import WallAnchor

log = logging.getLogger("tokenswarm")

#: A dispatch later than this versus its schedule counts as "late" (generator behind).
LATE_THRESHOLD_MS = 10.0
#: Unwritable records named one by one (in the log and the manifest); the rest are counted.
UNWRITABLE_NAMED = 10


def request_key(api: str, payload: Any, max_tokens: int | None, sampling: dict[str, Any]) -> str:
    """Stable hash of what was asked (content + sampling), independent of model name and run."""
    blob = orjson.dumps({"api": api, "input": payload, "max_tokens": max_tokens, "sampling": sampling},
                        option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()


def api_prefix(base_url: str) -> str:
    """The OpenAI API path prefix under ``base_url`` (which may or may not end in ``/v1``)."""
    prefix = urlsplit(base_url).path.rstrip("/")
    return prefix if prefix.endswith("/v1") else prefix + "/v1"


def endpoint_path(base_url: str, api: str) -> str:
    """Request path for ``api`` under ``base_url``."""
    return api_prefix(base_url) + ("/chat/completions" if api == "chat" else "/completions")


class RunContext:
    """State of one process for one test run."""

    def __init__(self, *, scenario: Any, run_id: str, worker_id: str, base_url: str, model: str,
                 sink: Any, role: str, worker_index: int = 0, events: Any = None,
                 request_event: Callable[..., None] | None = None, prompt_sources: dict[str, Any] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.scenario = scenario
        self.run_id = run_id
        self.worker_id = worker_id
        self.worker_index = worker_index
        self.role = role
        self.base_url = split_userinfo(base_url)[0].rstrip("/")  # user info travels as basic auth
        self.model = model
        self.sink = sink
        self.events = events
        self.request_event = request_event
        self.clock = clock
        self.anchor = WallAnchor(time.time(), clock())  # the one wall-clock reading of this process
        self.live = LiveStats()
        self.prompt_sources: dict[str, Any] = prompt_sources or {}
        self._next_seq = 0
        self.requests_started = 0
        self.in_flight = 0
        self.late_dispatches = 0
        self.max_schedule_lag_ms = 0.0
        self.stopping = False
        self.halted = False  # set by the circuit breaker: send no more requests
        # current load step (broadcast by the shape on the master)
        self.step_index: int | None = None
        self.step_name: str | None = None
        self.step_kind: str | None = None
        self.step_target: float | None = None
        self.phase: str | None = None
        self.worker_count = 1
        self.step_steady_at: float | None = None
        target = scenario.target
        self.api = target.api
        self.path = endpoint_path(self.base_url, self.api)
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
                        "Accept-Encoding": "identity", **target_headers(target, base_url)}
        if not getattr(target, "keep_alive", True):
            self.headers["Connection"] = "close"  # the server may close too: a new connection per request
        self.keep_outputs = scenario.traffic.keep_outputs
        self.stream_options = {"include_usage": True}
        if target.continuous_usage_stats:
            self.stream_options["continuous_usage_stats"] = True
        self._warned_late = False
        self._user_ordinals: dict[str, int] = {}
        #: records that could not be written (their seq is spent: the gap shows they are lost)
        self.records_unwritable = 0
        self._warned_live = False
        self.unwritable: list[str] = []  # the first UNWRITABLE_NAMED, "seq N (task): why"

    # -- identity -------------------------------------------------------------------------------
    def next_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    @property
    def last_seq(self) -> int | None:
        return self._next_seq - 1 if self._next_seq else None

    def next_user_ordinal(self, class_name: str) -> int:
        n = self._user_ordinals.get(class_name, 0)
        self._user_ordinals[class_name] = n + 1
        return n

    def rng_for(self, *parts: Any) -> random.Random:
        """A deterministic RNG for (scenario seed, worker index, parts...)."""
        return random.Random(f"{self.scenario.traffic.seed}:{self.worker_index}:" + ":".join(map(str, parts)))

    # -- steps ----------------------------------------------------------------------------------
    def set_step(self, msg: dict[str, Any]) -> None:
        self.step_index = msg.get("index")
        self.step_name = msg.get("name")
        self.step_kind = msg.get("kind")
        self.step_target = msg.get("target")
        self.phase = msg.get("phase")
        self.worker_count = max(1, int(msg.get("worker_count") or 1))
        self.step_steady_at = msg.get("steady_at")  # epoch s the step's steady window began (master's clock)

    def rate_per_worker(self) -> float | None:
        if self.step_kind != "rate" or not self.step_target:
            return None
        return float(self.step_target) / self.worker_count

    # -- requests -------------------------------------------------------------------------------
    def body(self, payload_key: str, payload: Any, max_tokens: int, sampling: dict[str, Any],
             extra: dict[str, Any] | None = None, model: str | None = None) -> bytes:
        """The request body; ``model``: the one drawn for this request (None: the run's model)."""
        body: dict[str, Any] = {"model": model or self.model, payload_key: payload, "max_tokens": max_tokens,
                                "stream": True, "stream_options": self.stream_options, **sampling}
        if extra:
            body.update(extra)
        return orjson.dumps(body)

    def base(self, *, task: str, user_class: str, scheduled_s: float, key: str,
             session_id: str | None = None, turn: int | None = None, max_tokens: int | None = None,
             temperature: float | None = None, extra: dict[str, Any] | None = None,
             model: str | None = None) -> RecordIdentity:
        """The record's identity (:class:`~tokenswarm.record.RecordIdentity`); ``seq`` is assigned
        when the record is emitted. ``schedule_lag_ms`` is not known yet (``None``): the client
        takes it from the send's own clock reading."""
        return RecordIdentity(run_id=self.run_id, worker_id=self.worker_id, task=task, user_class=user_class,
                              request_key=key, scheduled_at_s=self.anchor.epoch(scheduled_s),
                              session_id=session_id, turn=turn,
                              step=self.step_index, phase=self.phase, api=self.api, model=model or self.model,
                              max_tokens=max_tokens, temperature=temperature, extra=extra)

    def _unwritable(self, record: RequestRecord, exc: BaseException) -> None:
        """Count (and name the first few of) the records the sink refused: they are lost, and
        the manifest and the verdict say so."""
        self.records_unwritable += 1
        if len(self.unwritable) < UNWRITABLE_NAMED:
            note = f"seq {record.seq} ({record.task}): {type(exc).__name__}: {str(exc)[:160]}"
            self.unwritable.append(note)
            log.error("tokenswarm: a record could not be written and is LOST: %s", note)

    def note_late(self, lag_ms: float) -> None:
        """Count a dispatch that left later than planned; warn loudly the first time."""
        if lag_ms > LATE_THRESHOLD_MS:
            self.late_dispatches += 1
            if not self._warned_late:
                self._warned_late = True
                log.warning("tokenswarm: the GENERATOR IS FALLING BEHIND its arrival schedule (a dispatch left "
                            "%.1f ms late). Latencies still count from the schedule; add workers or lower the rate.",
                            lag_ms)

    def emit(self, record: RequestRecord, user: Any = None) -> RequestRecord:
        """Give the record its sequence number and hand it to the sink, live stats and listeners."""
        record = record.with_seq(self.next_seq())
        lag = record.schedule_lag_ms
        if lag is not None and lag > self.max_schedule_lag_ms:
            self.max_schedule_lag_ms = lag
        try:
            self.sink.add(record)
        except Exception as exc:  # the stream's values are checked when read: this is the last resort
            self._unwritable(record, exc)
            return record
        try:
            self.live.observe(record)
        except Exception:  # live figures are a view: a record they cannot take stays written
            if not self._warned_live:
                self._warned_live = True
                log.exception("tokenswarm: live statistics could not take record seq %s (kept in the records)",
                              record.seq)
        if self.events is not None:
            self.events.llm_request.fire(record=record, user=user)
        if self.request_event is not None and record.outcome != "cancelled":
            failure = None if record.outcome == "ok" else _LLMFailure(_locust_error(record))
            self.request_event(request_type="POST", name=record.task, response_time=record.e2e_ms,
                               response_length=record.output_tokens or 0, exception=failure, context={},
                               url=self.path, response=None, start_time=record.sent_at_s)
        return record


class _LLMFailure(Exception):
    """Low-cardinality failure shown in Locust's failures table."""


def _locust_error(record: RequestRecord) -> str:
    # Locust keys its failure table by message text: keep it to outcome + status/kind.
    if record.outcome == "http_error":
        return f"http_error {record.http_status}" if record.http_status else "http_error connection"
    if record.outcome == "timeout":
        return f"timeout ({(record.error or '').split(' ')[0]})"
    return record.outcome


def make_worker_id(index: int | None = None) -> str:
    base = f"{socket.gethostname()}-{os.getpid()}"
    return base if index is None or index < 0 else f"{base}-w{index}"
