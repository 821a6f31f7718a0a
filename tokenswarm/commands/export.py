"""``tokenswarm export RUN --jsonl``: a run's Parquet records store as JSON lines.

Writes ``records.jsonl`` (or ``--out FILE``, ``-`` for standard output) with one
:class:`~tokenswarm.record.RequestRecord` per line, the same bytes a JSONL run would have
written, part by part and batch by batch (memory stays flat for any run size). Unfinished
parts left by a killed writer are skipped with a note; the run directory is not changed
otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tokenswarm.collect.store import StoreFormatError, store_parts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run directory with records-NNNNNN.parquet parts")
    parser.add_argument("--jsonl", action="store_true", required=True, help="export as JSON lines (the one format)")
    parser.add_argument("--out", help="output file (default: RUN/records.jsonl; '-' = standard output)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing output file")


def run(args: argparse.Namespace) -> int:
    from tokenswarm.collect.parquet_store import iter_records  # pyarrow: only to read a store, not for --help

    run_dir = Path(args.run)
    parts, notes = store_parts(run_dir) if run_dir.is_dir() else ([], [])
    if not parts:
        print(f"tokenswarm export: {run_dir}: no records-NNNNNN.parquet parts (not a Parquet run directory?)",
              file=sys.stderr)
        return 2
    for note in notes:
        print(f"tokenswarm export: {note}", file=sys.stderr)
    target = args.out or str(run_dir / "records.jsonl")
    if target != "-" and Path(target).exists() and not args.force:
        print(f"tokenswarm export: {target} exists; give --force to overwrite or --out elsewhere", file=sys.stderr)
        return 2
    fh = sys.stdout.buffer if target == "-" else open(target, "wb")
    count = 0
    try:
        batch: list[bytes] = []
        for rec in iter_records(run_dir):
            batch.append(rec.to_json() + b"\n")
            if len(batch) >= 4096:
                fh.write(b"".join(batch))
                count += len(batch)
                batch = []
        fh.write(b"".join(batch))
        count += len(batch)
    except StoreFormatError as exc:
        print(f"tokenswarm export: {exc}", file=sys.stderr)
        return 2
    finally:
        if fh is not sys.stdout.buffer:
            fh.close()
    if target != "-":
        print(f"tokenswarm export: {count} records from {len(parts)} part(s) -> {target}", file=sys.stderr)
    return 0
