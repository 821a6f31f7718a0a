"""CSV tables from a summary dict: one file per table, the union of row keys as columns."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import orjson

from tokenswarm.redact import redact


def write_table(path: Path, rows: list[dict[str, Any]]) -> Path | None:
    """Write rows (lists and dicts in cells become JSON); nothing is written for no rows."""
    if not rows:
        return None
    columns: list[str] = []
    for r in rows:
        for k in r:
            if k not in columns:
                columns.append(k)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow(redact(["" if r.get(c) is None else orjson.dumps(r[c]).decode() if isinstance(r.get(c), (list, dict))
                        else r[c] for c in columns]))
    return path


def report_tables(s: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Table name -> rows of a single-run summary."""
    spec_rows = [{k: v for k, v in r.items() if k != "tokens_per_chunk_histogram"} for r in s["spec_decode"]["rows"]]
    hist = [{"step_index": r["step_index"], "step_name": r["step_name"], "task": r["task"], **h}
            for r in s["spec_decode"]["rows"] for h in r["tokens_per_chunk_histogram"]]
    return {
        "steps": s["steps"],
        "errors": s["errors"],
        "slo_results": s["slo_results"],
        "curves": s["curves"]["points"],
        "spec_decode": spec_rows,
        "tokens_per_chunk_histogram": hist,
        "cost": s["cost"],
        "soak_windows": s["soak"]["windows"],
        "soak_drift": s["soak"]["drift"],
        "soak_error_bursts": s["soak"]["error_bursts"],
        "resources": (s.get("resources") or {}).get("rows", []),
        "observability": [{k: v for k, v in o.items() if k != "known_names"} for o in s.get("observability", [])],
        "ttft_breakdown": s.get("ttft_breakdown", []),
        "server_view": s.get("server_view", []),
        "sent": s.get("sent", []),
    }


def compare_tables(s: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Table name -> rows of a comparison summary."""
    return {"compare_steps": s["rows"], "divergent_outputs": s["consistency"]["examples"],
            "compare_resources": (s.get("resources") or {}).get("rows", [])}


def write_tables(out_dir: Path, tables: dict[str, list[dict[str, Any]]]) -> list[Path]:
    """Write ``<name>.csv`` for every non-empty table."""
    written = []
    for name, rows in tables.items():
        p = write_table(out_dir / f"{name}.csv", rows)
        if p:
            written.append(p)
    return written
