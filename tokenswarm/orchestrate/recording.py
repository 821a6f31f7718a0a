"""Recording a run: its directory, its manifest, its records sink and its health log.

:class:`RunRecording` owns every file of a run directory that the master (or the single local
process) writes: ``manifest.json`` (through :class:`~tokenswarm.collect.manifest.ManifestFile`),
the records (a JSONL or Parquet writer; on a master fed by the :class:`Collector` of worker
batches), ``generator_health.jsonl``, ``server_metrics.jsonl`` (the scrapers write lines, this
class opens and closes the file), and ``live_summary.json`` / ``live_windows.jsonl``.

It knows nothing of Locust: the orchestration (:mod:`tokenswarm.orchestrate.controller`) decides
*when* something is recorded, this module *how*, so the files of a run have one owner.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import IO, Any

import orjson

from tokenswarm.collect.manifest import ManifestFile, command_line, new_manifest
from tokenswarm.collect.relay import Collector
from tokenswarm.collect.store import STORE_FORMAT_VERSION, choose_format
from tokenswarm.collect.writer import RecordsWriter
from tokenswarm.load.health import merge_windows
from tokenswarm.manifest import RecordsStore, RunTarget, Totals

#: Health sample fields whose run maximum goes into ``manifest.generator_health``.
_PEAK_KEYS = {"cpu_pct": "max_cpu_pct", "loop_lag_max_ms": "max_loop_lag_ms", "rss_mb": "max_rss_mb"}


class RunRecording:
    """The files of one run directory, open from :meth:`open` until :meth:`close`."""

    def __init__(self, run_dir: Path, manifest: ManifestFile, writer: Any, collector: Collector | None) -> None:
        self.run_dir = run_dir
        self.manifest = manifest
        self.writer = writer  # RecordsWriter or ParquetRecordsWriter (same interface)
        self.collector = collector  # master only: worker batches -> writer, loss accounting
        self.health_fh: IO[bytes] | None = None
        self.metrics_fh: IO[bytes] | None = None
        #: [start, end, reason] windows where the generator's timings are suspect (merged, bounded)
        self.untrusted: list[list[Any]] = []
        self.health_peaks: dict[str, float] = {}
        self._last_window: tuple[float, Any] | None = None

    @classmethod
    def open(cls, out: Path, run_id: str, scenario: Any, *, load_mode: str, target: RunTarget,
             records_format: str, records_gzip: bool, records_rotate_mb: float, is_master: bool) -> RunRecording:
        """Create the run directory, its first manifest and its records writer."""
        out.mkdir(parents=True, exist_ok=True)
        fmt = choose_format(records_format or "auto", scenario.load, bool(records_gzip or records_rotate_mb))
        manifest = new_manifest(run_id, scenario=scenario.resolved(), scenario_name=scenario.name,
                                command=command_line(), load_mode=load_mode)
        manifest_file = ManifestFile(out, manifest)
        manifest_file.update(target=target, records_store=RecordsStore(fmt, STORE_FORMAT_VERSION))
        writer: Any
        if fmt == "parquet":
            from tokenswarm.collect.parquet_store import ParquetRecordsWriter  # pyarrow: only runs that store Parquet

            writer = ParquetRecordsWriter(out)
        else:
            writer = RecordsWriter(out, gzip_output=bool(records_gzip),
                                   rotate_bytes=int(records_rotate_mb * 1e6) or None)
        rec = cls(out, manifest_file, writer, Collector(writer) if is_master else None)
        rec.health_fh = open(out / "generator_health.jsonl", "ab")
        return rec

    def open_metrics_log(self) -> IO[bytes]:
        """``server_metrics.jsonl``, shared by every scraper of the run."""
        if self.metrics_fh is None:
            self.metrics_fh = open(self.run_dir / "server_metrics.jsonl", "ab")
        return self.metrics_fh

    # -- during the run ----------------------------------------------------------------------
    def on_health_sample(self, sample: dict[str, Any]) -> None:
        """A generator health sample (own or a worker's): log it, keep peaks and untrusted windows."""
        if self.health_fh is not None and not self.health_fh.closed:
            self.health_fh.write(orjson.dumps(sample) + b"\n")
            self.health_fh.flush()
        for key in _PEAK_KEYS:
            v = sample.get(key)
            if v is not None:
                self.health_peaks[key] = max(self.health_peaks.get(key, 0.0), float(v))
        # the master's own samples do not make worker timings suspect: it sends no requests
        if sample.get("untrusted") and sample.get("role") != "master":
            reason = f"{sample['worker_id']}: " + "; ".join(sample["untrusted"])
            self.untrusted.append([sample.get("since", sample["t"] - 5.0), sample["t"], reason])
            self.untrusted = merge_windows(self.untrusted, 5.0)[-200:]  # bounded for soak runs

    def write_live_summary(self, doc_of_window: Any) -> None:
        """``live_summary.json`` (the last window, replaced atomically) + a line in ``live_windows.jsonl``.

        ``doc_of_window(prev_t, prev_snapshot, now_t)`` returns ``(doc, snapshot)``. A soak that is
        killed still leaves these readable next to the records.
        """
        now_t = time.time()
        prev_t, prev = self._last_window or (self.manifest.current.started_at or now_t, None)
        doc, snap = doc_of_window(prev_t, prev, now_t)
        self._last_window = (now_t, snap)
        tmp = self.run_dir / "live_summary.json.tmp"
        tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        os.replace(tmp, self.run_dir / "live_summary.json")
        with open(self.run_dir / "live_windows.jsonl", "ab") as fh:
            fh.write(orjson.dumps(doc) + b"\n")

    # -- the end -----------------------------------------------------------------------------
    def finalize(self, *, workers: list[dict[str, Any]], totals: Totals, health: dict[str, Any],
                 cpu_warning_emitted: bool, stop_reason: str = "plan_done", cut: bool = False,
                 complete: bool = True) -> None:
        """Write the final manifest: end time, why the run stopped, workers, totals, generator
        health, warnings, complete.

        ``cut``: the run stopped before its plan ended, so a step still open is ``partial``;
        ``complete`` is false for an interrupted run (its records are all written all the same).
        """
        m = self.manifest
        ended_at = time.time()
        m.update(ended_at=ended_at, stop_reason=stop_reason)
        m.close_open_steps(ended_at, partial=cut)
        health = dict(health)
        health["cpu_warning"] = cpu_warning_emitted or bool(health.get("cpu_warning", False))
        for key, name in _PEAK_KEYS.items():
            health[name] = self.health_peaks.get(key)
        health["untrusted_windows"] = self.untrusted
        if self.untrusted:
            health["cpu_warning"] = health["cpu_warning"] or any("CPU" in w[2] for w in self.untrusted)
            m.warn(f"the load generator was a bottleneck in {len(self.untrusted)} window(s) "
                   f"({self.untrusted[0][2]}): timings there are inflated")
        if health.get("late_dispatches"):
            m.warn(f"the generator fell behind its arrival schedule {health['late_dispatches']} times "
                   "(latencies count from the schedule; see schedule_lag_ms)")
        if health.get("cpu_warning"):
            m.warn("a load generator process used more than 90% CPU: timings may be inflated")
        m.update(workers=tuple(workers), totals=totals,
                 generator_health={**m.current.generator_health, **health}, complete=complete)
        m.write()

    def close_records(self) -> None:
        if self.metrics_fh is not None:
            self.metrics_fh.close()
        if self.writer is not None:
            self.writer.close()

    def close(self) -> None:
        if self.health_fh is not None:
            self.health_fh.close()
