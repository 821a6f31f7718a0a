"""Append-only records files: batched writes, optional gzip, optional size rotation.

Records arrive as already-encoded JSON lines (bytes), so the master can append what
workers sent without decoding it. Writes are batched (``flush_bytes``) so a busy run does
not pay a syscall per record; ``flush()`` is called periodically and at the end, and every
flush ends on a line boundary, so a crash loses at most the unflushed batch and never
leaves half a record in the middle of the file (a half-written *last* line is possible and
the reader skips it with a warning).
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import IO

from tokenswarm.redact import redact_bytes


class RecordsWriter:
    """Writes ``records.jsonl`` (or ``.jsonl.gz``), rotating to ``records-000001...`` by size."""

    def __init__(self, run_dir: str | os.PathLike[str], *, gzip_output: bool = False,
                 rotate_bytes: int | None = None, flush_bytes: int = 256 * 1024) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.gzip_output = gzip_output
        self.rotate_bytes = rotate_bytes
        self.flush_bytes = flush_bytes
        self._buf: list[bytes] = []
        self._buffered = 0
        self._part = 0
        self._written_in_part = 0
        self.records_written = 0
        self.bytes_written = 0
        self._fh: IO[bytes] | None = None
        self.paths: list[Path] = []
        # Created at once: a run stopped before its first record still has its (empty) records
        # file, so "nothing recorded" reads as such rather than as a missing file.
        self._open()

    def _name(self) -> str:
        ext = ".jsonl.gz" if self.gzip_output else ".jsonl"
        return f"records{ext}" if not self.rotate_bytes else f"records-{self._part + 1:06d}{ext}"

    def _open(self) -> IO[bytes]:
        if self._fh is None:
            path = self.run_dir / self._name()
            self.paths.append(path)
            raw = open(path, "ab")
            fh: IO[bytes] = (gzip.GzipFile(fileobj=raw, mode="ab", compresslevel=5)  # type: ignore[assignment]  # GzipFile is a binary IO
                             if self.gzip_output else raw)
            self._fh = fh
            self._raw = raw
            return fh
        return self._fh

    def write_lines(self, data: bytes, count: int) -> None:
        """Queue ``count`` newline-terminated records (already JSON-encoded)."""
        if not data:
            return
        self._buf.append(data)
        self._buffered += len(data)
        self.records_written += count
        if self._buffered >= self.flush_bytes:
            self.flush()

    def flush(self) -> None:
        if not self._buf:
            return
        data = redact_bytes(b"".join(self._buf))
        self._buf.clear()
        self._buffered = 0
        fh = self._open()
        fh.write(data)
        fh.flush()
        if self.gzip_output:
            self._raw.flush()
        self.bytes_written += len(data)
        self._written_in_part += len(data)
        if self.rotate_bytes and self._written_in_part >= self.rotate_bytes:
            self._close_file()
            self._part += 1
            self._written_in_part = 0

    def _close_file(self) -> None:
        if self._fh is not None:
            self._fh.close()
            if self.gzip_output:
                self._raw.close()
            self._fh = None

    def close(self) -> None:
        self.flush()
        self._close_file()
