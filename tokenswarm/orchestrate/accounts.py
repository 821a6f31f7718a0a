"""Who sent what: the final manifest's worker accounts, totals and generator health.

On a master they come from the collector (every worker's batches) and the workers' last
reports; in a local run from the run context that emitted the records. A record that never
arrived or could not be written is counted and named in a manifest warning, never dropped
silently.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from tokenswarm.collect.relay import Collector
from tokenswarm.load.context import RunContext
from tokenswarm.manifest import Totals
from tokenswarm.orchestrate.recording import RunRecording
from tokenswarm.orchestrate.workers import WorkerReports
from tokenswarm.wire.timing import provenance as timing_provenance

#: The final manifest's ``workers``, ``totals`` and ``health``.
Accounts = tuple[list[dict[str, Any]], Totals, dict[str, Any]]


def master_accounts(collector: Collector, reports: WorkerReports, warn: Callable[[str], None]) -> Accounts:
    """Every worker's account (with its timing paths from its last report), the totals, their health."""
    workers = [a.to_dict() for a in collector.workers.values()]
    for w in workers:  # each worker's timing paths, from its last report
        t = reports.timing_of(w.get("worker_id"))
        if t is not None:
            w["timing"] = t
    for a in collector.workers.values():
        if a.lost_reason:
            warn(f"worker {a.worker_id}: {a.lost_reason}; missing seqs {a.missing}")
        elif a.missing:  # e.g. records the worker could not write (its log names them)
            warn(f"worker {a.worker_id}: records never arrived, missing seqs {a.missing}")
    return workers, Totals(**collector.totals()), reports.health()


def local_accounts(ctx: RunContext, warn: Callable[[str], None]) -> Accounts:
    """The local process as the run's one worker: what it emitted, and what it could not write."""
    workers = [{"worker_id": ctx.worker_id, "host": os.uname().nodename, "pid": os.getpid(),
                "clock_offset_s": 0.0, "records_received": ctx._next_seq,
                "last_seq": ctx.last_seq, "missing_seqs": [], "lost_reason": None,
                "timing": timing_provenance()}]
    lost = ctx.records_unwritable
    totals = Totals(requests_started=ctx.requests_started, records_received=ctx._next_seq - lost,
                    records_lost=lost, records_missing_seqs=lost)
    if lost:
        warn(f"{lost} record(s) could not be written and are lost: " + "; ".join(ctx.unwritable)
             + ("; ..." if lost > len(ctx.unwritable) else ""))
    health = {"late_dispatches": ctx.late_dispatches, "max_schedule_lag_ms": round(ctx.max_schedule_lag_ms, 3)}
    return workers, totals, health


def final_accounts(rec: RunRecording, reports: WorkerReports, ctx: RunContext | None, admission: Any) -> Accounts:
    """The final manifest's accounts: the master's workers, the local process, or (no run
    context) what the manifest holds; refused worker connections are named in a warning."""
    warn = rec.manifest.warn
    if rec.collector is not None:
        accounts = master_accounts(rec.collector, reports, warn)
    elif ctx is not None:
        accounts = local_accounts(ctx, warn)
    else:
        accounts = [dict(w) for w in rec.manifest.current.workers], rec.manifest.current.totals, {}
    refused = admission.refusals() if admission is not None else []
    if refused:
        rec.manifest.update(workers_refused=tuple(refused))
        warn(f"{len(refused)} worker connection(s) refused, their messages dropped: "
             + ", ".join(f"{r['worker']} ({r['reason']})" for r in refused))
    return accounts
