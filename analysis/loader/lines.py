"""Reading JSON-lines files block by block: plain or gzip, tolerant of a truncated tail.

:func:`_iter_lines` yields numbered lines from big decompressed blocks (:func:`_blocks`,
which keeps what precedes a cut-short gzip stream); :func:`_tolerate_bad_line` decides what a
line that is not JSON means (a blank or truncated last line is skipped, anything else is a
:class:`~analysis.errors.RunInputError` naming file and line); :func:`_iter_json` combines the
two for small files such as ``server_metrics.jsonl``.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Iterator

import orjson

from tokenswarm.analysis.errors import RunInputError


def _blocks(path: Path, warnings: list[str], block_bytes: int) -> Iterator[bytes]:
    """Decompressed blocks of a file; a gzip stream cut short ends with a warning, not an error.

    Gzip is decompressed incrementally (``zlib``), so everything before the cut is kept, and
    concatenated gzip members (a writer that reopened the file) are followed.
    """
    with open(path, "rb") as fh:
        if not path.name.endswith(".gz"):
            while block := fh.read(block_bytes):
                yield block
            return
        d = zlib.decompressobj(wbits=31)
        while raw := fh.read(block_bytes // 4):
            while raw:
                try:
                    out = d.decompress(raw)
                except zlib.error as exc:
                    warnings.append(f"{path}: corrupt compressed data ({exc}); read what was complete")
                    return
                if out:
                    yield out
                raw = b""
                if d.eof and d.unused_data:
                    raw, d = d.unused_data, zlib.decompressobj(wbits=31)
        tail = d.flush()
        if tail:
            yield tail
        if not d.eof:
            warnings.append(f"{path}: compressed stream cut short (crash mid-write?); read what was complete")


def _iter_lines(path: Path, warnings: list[str], block_bytes: int = 8 << 20) -> Iterator[tuple[int, bytes, bool]]:
    """Yield ``(line_number, line, is_last)``, reading big blocks (much faster than line iteration)."""
    lineno = 0
    carry = b""
    pending: bytes | None = None
    for block in _blocks(path, warnings, block_bytes):
        lines = (carry + block).split(b"\n")
        carry = lines.pop()  # incomplete (or empty) tail
        for line in lines:
            if pending is not None:
                yield lineno, pending, False
            lineno += 1
            pending = line
    if carry:
        if pending is not None:
            yield lineno, pending, False
        yield lineno + 1, carry, True
    elif pending is not None:
        yield lineno, pending, True


def _tolerate_bad_line(path: Path, lineno: int, line: bytes, is_last: bool, warnings: list[str]) -> None:
    """A line that is not JSON: blank lines pass, a truncated *last* line is skipped with a
    warning (a writer killed mid-write); anywhere else it is an error naming file and line."""
    if not line.strip():
        return
    if is_last:
        warnings.append(f"{path}:{lineno}: truncated last line skipped (the writer probably stopped mid-write)")
        return
    raise RunInputError(f"{path}:{lineno}: not valid JSON (only a truncated last line is tolerated)") from None


def _iter_json(path: Path, warnings: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Decoded JSON objects of a JSON-lines file; only the last line may be broken (skipped)."""
    loads = orjson.loads
    for lineno, line, is_last in _iter_lines(path, warnings):
        try:
            obj = loads(line)
        except orjson.JSONDecodeError:
            _tolerate_bad_line(path, lineno, line, is_last, warnings)
            continue
        if not isinstance(obj, dict):
            raise RunInputError(f"{path}:{lineno}: expected a JSON object per line")
        yield lineno, obj
