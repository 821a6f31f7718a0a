"""Ground-truth log (see the README, "Ground-truth log"): one JSON line per finished request.

Lines are buffered in memory and written in batches by :meth:`TruthLog.flush` (called
periodically by the server and on shutdown) so the event loop never waits on the disk
per request.
"""

from __future__ import annotations

from typing import Any

import orjson


class TruthLog:
    """Append-only JSON-lines writer with batched flushes."""

    def __init__(self, path: str, max_batch: int = 2000) -> None:
        self.path = path
        self._f = open(path, "ab")
        self._buf: list[bytes] = []
        self.max_batch = max_batch
        self.written = 0

    def add(self, record: dict[str, Any]) -> None:
        """Queue one record (see CONTRACTS.md for its keys)."""
        self._buf.append(orjson.dumps(record) + b"\n")

    @property
    def pending(self) -> int:
        return len(self._buf)

    def flush(self) -> None:
        """Write everything queued so far."""
        if not self._buf:
            return
        data = b"".join(self._buf)
        self.written += len(self._buf)
        self._buf.clear()
        self._f.write(data)
        self._f.flush()

    def close(self) -> None:
        self.flush()
        self._f.close()


def read_truth(path: str) -> list[dict[str, Any]]:
    """All records of a truth log (ignores a torn last line)."""
    out = []
    with open(path, "rb") as f:
        for line in f:
            if line.endswith(b"\n"):
                out.append(orjson.loads(line))
    return out
