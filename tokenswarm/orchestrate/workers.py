"""The master's side of its workers: what they report, stopping them, and knowing they are done.

Locust runs the workers; tokenswarm adds to each heartbeat report a ``tokenswarm`` section
(in flight, last sequence number, live-stats delta, health samples, timing paths). This
module keeps the last section of every worker and answers the two questions the end of a
run needs: have all workers sent their final batch, and what did they report about health.
"""

from __future__ import annotations

import time
from typing import Any

import gevent

from tokenswarm.collect.relay import Collector

#: Locust worker states in which a worker generates no load (and so sends no final message).
IDLE_WORKER_STATES = ("missing", "stopped", "ready", "init")


class WorkerReports:
    """The last ``tokenswarm`` report of every worker, by worker id."""

    def __init__(self) -> None:
        self.status: dict[str, dict[str, Any]] = {}

    def record(self, client_id: str, info: dict[str, Any], collector: Collector | None) -> dict[str, Any]:
        """Keep a report (without its live delta and health samples, handled by the caller)."""
        info = {k: v for k, v in info.items() if k not in ("live", "health")}
        info["client_id"] = client_id
        info["seen_at"] = time.time()
        self.status[info["worker_id"]] = info
        if collector is not None:
            acc = collector.account(info["worker_id"])
            acc.client_id, acc.host, acc.pid = client_id, info.get("host"), info.get("pid")
            acc.clock_offset_s = round(info.get("wall_s", time.time()) - time.time(), 3)
            collector.on_progress(info["worker_id"], info.get("last_seq"), info.get("requests_started", 0))
        return info

    def sum(self, key: str) -> int:
        return sum(int(w.get(key, 0)) for w in self.status.values())

    def health(self) -> dict[str, Any]:
        """Late dispatches, the worst schedule lag and any CPU warning over all workers."""
        ws = list(self.status.values())
        return {"late_dispatches": sum(w.get("late_dispatches", 0) for w in ws),
                "max_schedule_lag_ms": max((w.get("max_schedule_lag_ms", 0) for w in ws), default=0.0),
                "cpu_warning": any(w.get("cpu_warning") for w in ws)}

    def timing_of(self, worker_id: str | None) -> Any:
        return self.status.get(worker_id or "", {}).get("timing")


def stop_workers(runner: Any) -> None:
    """Make sure workers stop (and so flush) before the master closes the run directory.

    A worker still running here means Locust is quitting (headless end, the run-time
    limit, an abort): its quit fires the master's test_stop *before* telling workers
    anything, so without this the last records would arrive after the files were closed.
    The message is "quit", not "stop": a worker stops (and sends its final records) on
    either, but after "stop" Locust's worker sleeps ``stop_timeout`` before it reads its
    next message, so a later quit reached it 30 s late and it lingered until then.
    """
    from locust.rpc import Message  # Locust's RPC: only a master needs it

    for client in list(runner.clients.all):
        if client.state not in IDLE_WORKER_STATES:
            runner.server.send_to_client(Message("quit", None, client.id))  # type: ignore[no-untyped-call]  # Locust's Message is untyped


def workers_settled(runner: Any, collector: Collector) -> bool:
    """Every worker that was generating load has sent its final message (or has gone).

    Workers are matched by Locust client id, which every records/final message carries, so
    a worker whose first heartbeat report had not arrived yet (a run of a few seconds) is
    still waited for instead of being declared lost at once.
    """
    busy = {c.id for c in runner.clients.all if c.state not in IDLE_WORKER_STATES}
    final = {acc.client_id for acc in collector.workers.values() if acc.final_received}
    return busy <= final


def await_final_batches(runner: Any, collector: Collector, timeout_s: float) -> None:
    """Stop the workers and wait (up to ``timeout_s``) for every final batch; a worker whose
    final batch never came is accounted lost, with the reason in its account."""
    stop_workers(runner)
    deadline = time.monotonic() + timeout_s
    while not workers_settled(runner, collector) and time.monotonic() < deadline:
        gevent.sleep(0.2)
    for wid, acc in collector.workers.items():
        if not acc.final_received:
            collector.on_worker_lost(wid, "worker stopped reporting before the end (killed or lost)")
