"""The chunk gaps of selected requests, as the exact path reads them (every gap in memory):
their subset, the chunks counted by token count, and the sorted ITL and inter-chunk samples.

:mod:`analysis.chunkhist` is the other path: the same statistics from histograms, for runs
whose store never holds every gap.
"""

from __future__ import annotations

import numpy as np

from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.stats import SortedParts
from tokenswarm.metrics import itl_samples


def chunk_subset(run: Run, req_mask: np.ndarray, with_gaps: bool = True) -> dict[str, np.ndarray]:
    """Chunk gaps of the selected requests: gaps, tokens, exact-count flag, owning task code."""
    n_gaps = run.n_gaps
    cm = np.repeat(req_mask, n_gaps)
    ng = n_gaps[req_mask]
    task = run["task"][req_mask]
    small = np.int8 if len(run.categories["task"]) < 127 else np.int32  # 4x less memory per chunk
    exact = run["has_chunk_tokens"][req_mask]
    out = {
        "gap_tokens": run.gap_tokens[cm],
        "exact": np.ones(int(ng.sum()), dtype=bool) if exact.all() else np.repeat(exact, ng),
        "task": np.repeat(task.astype(small), ng),
    }
    if with_gaps:
        out["gap_ms"] = run.gap_ms[cm]
        first = np.zeros(run.gap_ms.size, dtype=bool)
        first[run.gap_ptr[:-1][n_gaps > 0]] = True  # each request's first gap: deliveries start anew
        out["first_gap"] = first[cm]
    return out


def token_histogram(chunks: dict[str, np.ndarray]) -> np.ndarray:
    """Counts of chunks by token count (exact counts only; first chunks excluded by construction)."""
    tok = chunks["gap_tokens"][chunks["exact"]]
    return np.bincount(np.maximum(tok, 0).astype(np.intp)) if tok.size else np.zeros(0, dtype=np.int64)


def chunk_parts(chunks: dict[str, np.ndarray]) -> tuple[SortedParts, SortedParts, float | None]:
    """Sorted ITL and inter-chunk samples of a chunk subset, plus the per-chunk (inexact) share.

    ITL per token and per delivery (metrics.itl_samples): a delivery -- the chunks read
    together -- of n tokens after gap g gives n samples of g/n; chunks of requests without
    exact counts count as one token each; zero-token chunks give none.
    """
    gaps = chunks["gap_ms"]
    tok = chunks["gap_tokens"]
    exact = chunks["exact"]
    inter = SortedParts.from_values(gaps)
    n = tok if exact.all() else np.where(exact, tok, 1)
    if n.size == 0 or (n.min() == 1 and n.max() == 1 and gaps.min() > 0):
        itl = inter  # one token per delivery: per-token ITL is the inter-chunk gap
    else:
        values, weights = itl_samples(gaps, n, chunks["first_gap"])
        itl = SortedParts.from_values(values, weights)
    inexact = None if exact.size == 0 else float(1.0 - exact.mean())
    return itl, inter, inexact
