"""Client timings joined to a server's ground-truth log by response id.

Both ground-truth servers write the same log: the simulator (``tokenswarm sim --truth``) and
the uvicorn truth server (``python -m benchmarks.truthserver --truth``).

Shared by ``accuracy.py`` (tokenswarm's records) and ``generator.py`` (tokenswarm's records
and the plain-Locust baseline's per-event times). Errors are client minus server, in ms:

* TTFT: client TTFT - (first chunk sent - request received) on the server,
* chunk gap: each consecutive pair's client gap - server gap (when both saw as many chunks),
* e2e: client e2e_ms - (last chunk sent - request received) on the server (where the client
  gives one: the server writes the usage trailer and ``[DONE]`` microseconds after the last
  chunk, so the end of the response is its last chunk's write).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import numpy as np


def load_truth(path: str | Path) -> dict[str, dict]:
    """Truth records by response id (a torn last line is ignored)."""
    out = {}
    for line in Path(path).read_text().splitlines():
        try:
            t = json.loads(line)
        except ValueError:
            continue
        out[t["id"]] = t
    return out


def record_errors(ttft_ms: float, offsets_ms: list[float], truth: dict) -> tuple[float, list[float]]:
    """(TTFT error, chunk-gap errors) of one request against its truth record."""
    sent = np.array([c[0] for c in truth["chunks"]]) * 1000.0
    ttft_err = ttft_ms - (sent[0] - truth["received"] * 1000.0)
    c = np.asarray(offsets_ms, dtype=float)
    gaps = (np.diff(c) - np.diff(sent)).tolist() if len(c) == len(sent) and len(c) > 1 else []
    return ttft_err, gaps


def e2e_error(e2e_ms: float, truth: dict) -> float:
    """Client e2e minus the server's: its last chunk's write minus the request's arrival, ms."""
    return e2e_ms - (truth["chunks"][-1][0] - truth["received"]) * 1000.0


def summarize(ttft_errs: Iterable[float], gap_errs: Iterable[float], e2e_errs: Iterable[float] = ()) -> dict:
    """p50/p99 of |error| in ms, and how many TTFTs, gaps and ends they cover."""
    te, ge = np.abs(np.fromiter(ttft_errs, float)), np.abs(np.fromiter(gap_errs, float))
    ee = np.abs(np.fromiter(e2e_errs, float))

    def q(a: np.ndarray, p: float) -> float:
        return float(np.quantile(a, p)) if len(a) else float("nan")

    return {"ttft_err_p50_ms": q(te, .5), "ttft_err_p99_ms": q(te, .99), "gap_err_p50_ms": q(ge, .5),
            "gap_err_p99_ms": q(ge, .99), "e2e_err_p50_ms": q(ee, .5), "e2e_err_p99_ms": q(ee, .99),
            "ttfts": len(te), "gaps": len(ge), "ends": len(ee)}


def join(requests: Iterable[tuple], truth: dict[str, dict]) -> dict:
    """Errors of ``(response id, TTFT ms, chunk offsets ms[, e2e ms])`` requests; ``joined`` counts matches."""
    ttft_errs: list[float] = []
    gap_errs: list[float] = []
    e2e_errs: list[float] = []
    total = joined = 0
    for rid, ttft_ms, offsets, *rest in requests:
        total += 1
        t = truth.get(rid) if rid else None
        if t is None or not t["chunks"] or ttft_ms is None:
            continue
        joined += 1
        e, gaps = record_errors(ttft_ms, offsets, t)
        ttft_errs.append(e)
        gap_errs.extend(gaps)
        if rest and rest[0] is not None:
            e2e_errs.append(e2e_error(rest[0], t))
    return {**summarize(ttft_errs, gap_errs, e2e_errs), "requests": total, "joined": joined}
