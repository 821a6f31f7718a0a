"""Moving records from where requests ran to the one run directory.

* :class:`FileSink` -- local runs (and the master): records go straight to the writer.
* :class:`RelaySink` -- on a worker: records are batched (bounded in size and age) and
  sent to the master with Locust's message channel. If sending fails the batch is spooled
  to a local file and the log says where, so nothing is lost silently.
* :class:`Collector` -- on the master: appends arriving batches, tracks per-worker sequence
  numbers, detects gaps, and accounts at the end for what never arrived (and why).

Records travel as already-encoded JSON lines, so the master never decodes them.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tokenswarm.collect.writer import RecordsWriter
from tokenswarm.record import RequestRecord
from tokenswarm.redact import redact_bytes

log = logging.getLogger("tokenswarm")

MSG_RECORDS = "tokenswarm_records"
MSG_FINAL = "tokenswarm_final"


class FileSink:
    """Writes records of this process directly (local runner or master's own use)."""

    def __init__(self, writer: RecordsWriter) -> None:
        self.writer = writer

    def add(self, record: RequestRecord) -> None:
        self.writer.write_lines(record.to_json() + b"\n", 1)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class RelaySink:
    """Batches records on a worker and ships them to the master."""

    def __init__(self, send: Callable[[str, Any], None], worker_id: str, *, max_records: int = 500,
                 max_bytes: int = 512 * 1024, spool_dir: str | None = None) -> None:
        self.send = send
        self.worker_id = worker_id
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.spool_dir = spool_dir or tempfile.gettempdir()
        self._lines: list[bytes] = []
        self._bytes = 0
        self._first_seq: int | None = None
        self._last_seq: int | None = None
        self.sent_records = 0
        self.spooled_records = 0
        self.spool_path: Path | None = None
        #: the worker's count of started requests, sent with every batch (set by the worker's wiring)
        self.requests_started: Callable[[], int] | None = None

    def add(self, record: RequestRecord) -> None:
        line = record.to_json() + b"\n"
        if self._first_seq is None:
            self._first_seq = record.seq
        self._last_seq = record.seq
        self._lines.append(line)
        self._bytes += len(line)
        if len(self._lines) >= self.max_records or self._bytes >= self.max_bytes:
            self.flush()

    def flush(self) -> None:
        if not self._lines:
            return
        payload = {"worker_id": self.worker_id, "first_seq": self._first_seq, "last_seq": self._last_seq,
                   "count": len(self._lines), "data": redact_bytes(b"".join(self._lines))}
        if self.requests_started is not None:
            # fresher than the heartbeat's: if the worker dies, the master knows what was in flight
            payload["requests_started"] = self.requests_started()
        lines, n = self._lines, len(self._lines)
        self._lines, self._bytes, self._first_seq, self._last_seq = [], 0, None, None
        try:
            self.send(MSG_RECORDS, payload)
            self.sent_records += n
        except Exception as exc:  # master unreachable: keep the data locally
            self._spool(b"".join(lines), n, exc)

    def _spool(self, data: bytes, n: int, exc: BaseException) -> None:
        if self.spool_path is None:
            self.spool_path = Path(self.spool_dir) / f"tokenswarm-spool-{self.worker_id}.jsonl"
            log.error("tokenswarm: cannot send records to the master (%s); spooling to %s", exc, self.spool_path)
        with open(self.spool_path, "ab") as fh:
            fh.write(data)
        self.spooled_records += n

    def final(self, last_seq: int | None, requests_started: int) -> None:
        """Flush, then tell the master how many records this worker produced."""
        self.flush()
        info = {"worker_id": self.worker_id, "last_seq": last_seq, "requests_started": requests_started,
                "spooled": self.spooled_records, "spool_path": str(self.spool_path) if self.spool_path else None}
        try:
            self.send(MSG_FINAL, info)
        except Exception as exc:
            log.error("tokenswarm: could not send the final record count to the master: %s", exc)

    def close(self) -> None:
        self.flush()


@dataclass
class WorkerAccount:
    worker_id: str
    client_id: str | None = None
    host: str | None = None
    pid: int | None = None
    clock_offset_s: float | None = None
    records_received: int = 0
    next_seq: int = 0
    missing: list[list[int]] = field(default_factory=list)  # [first, last] ranges
    duplicates: int = 0
    last_seq_reported: int | None = None  # from heartbeats / final message
    requests_started: int = 0
    final_received: bool = False
    lost_reason: str | None = None
    spool_path: str | None = None
    spooled: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"worker_id": self.worker_id, "client_id": self.client_id, "host": self.host, "pid": self.pid,
                "clock_offset_s": self.clock_offset_s, "records_received": self.records_received,
                "last_seq": self.next_seq - 1 if self.next_seq else None,
                "missing_seqs": self.missing, "duplicates": self.duplicates,
                "requests_started": self.requests_started, "final_received": self.final_received,
                "lost_reason": self.lost_reason, "spool_path": self.spool_path, "spooled": self.spooled}


class Collector:
    """Master side: appends batches to the writer and keeps per-worker sequence accounts."""

    def __init__(self, writer: RecordsWriter, clock: Callable[[], float] = time.time) -> None:
        self.writer = writer
        self.workers: dict[str, WorkerAccount] = {}
        self.clock = clock

    def account(self, worker_id: str, client_id: str | None = None) -> WorkerAccount:
        acc = self.workers.get(worker_id)
        if acc is None:
            acc = self.workers[worker_id] = WorkerAccount(worker_id)
        if client_id is not None:
            acc.client_id = client_id
        return acc

    def on_batch(self, msg: dict[str, Any], client_id: str | None = None) -> None:
        """A batch of record lines; ``client_id`` is the Locust node that sent it."""
        acc = self.account(msg["worker_id"], client_id)
        first, last, count = int(msg["first_seq"]), int(msg["last_seq"]), int(msg["count"])
        if first > acc.next_seq:
            acc.missing.append([acc.next_seq, first - 1])
        elif first < acc.next_seq:
            acc.duplicates += min(count, acc.next_seq - first)
        self.writer.write_lines(msg["data"], count)
        acc.records_received += count
        acc.next_seq = max(acc.next_seq, last + 1)
        acc.requests_started = max(acc.requests_started, int(msg.get("requests_started") or 0))

    def on_final(self, msg: dict[str, Any], client_id: str | None = None) -> None:
        acc = self.account(msg["worker_id"], client_id)
        acc.final_received = True
        acc.last_seq_reported = msg.get("last_seq")
        acc.requests_started = int(msg.get("requests_started") or 0)
        acc.spooled = int(msg.get("spooled") or 0)
        acc.spool_path = msg.get("spool_path")
        self._close_gap(acc, "records spooled on the worker (master unreachable)" if acc.spooled else None)

    def on_progress(self, worker_id: str, last_seq: int | None, requests_started: int) -> None:
        """Heartbeat-time report from a worker: what it has produced so far."""
        acc = self.account(worker_id)
        if last_seq is not None:
            acc.last_seq_reported = last_seq
        acc.requests_started = max(acc.requests_started, requests_started)

    def on_worker_lost(self, worker_id: str, reason: str) -> None:
        acc = self.account(worker_id)
        if not acc.final_received:
            acc.lost_reason = reason
            self._close_gap(acc, reason)

    def _close_gap(self, acc: WorkerAccount, reason: str | None) -> None:
        last = acc.last_seq_reported
        if last is not None and last >= acc.next_seq:
            acc.missing.append([acc.next_seq, last])
            if reason and not acc.lost_reason:
                acc.lost_reason = reason

    def all_final(self) -> bool:
        return all(a.final_received or a.lost_reason for a in self.workers.values())

    def totals(self) -> dict[str, int]:
        received = sum(a.records_received for a in self.workers.values())
        missing = sum(last - first + 1 for a in self.workers.values() for first, last in a.missing)
        started = sum(a.requests_started for a in self.workers.values())
        # Requests started but neither recorded nor accounted as missing were in flight when a worker died.
        in_flight_lost = sum(max(0, a.requests_started - a.records_received - sum(last - first + 1 for first, last in a.missing))
                             for a in self.workers.values() if a.lost_reason)
        return {"requests_started": started, "records_received": received,
                "records_lost": missing + in_flight_lost, "records_missing_seqs": missing,
                "in_flight_lost": in_flight_lost}


def spool_dir_default() -> str:
    return os.environ.get("TOKENSWARM_SPOOL_DIR", tempfile.gettempdir())
