"""The server's prefix-cache hit rate per step, from its Prometheus counters.

``vllm:prefix_cache_hits_total`` and ``vllm:prefix_cache_queries_total`` (vLLM v1, in tokens;
the ``vllm:gpu_prefix_cache_*`` names of older releases are read too) are differenced between
the last scrape at or before a step's steady window and the first at or after its end:
hit rate = hits delta / queries delta. A counter that went backwards (restart) gives None.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tokenswarm.analysis.loader import Run

_NAMES = (("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
          ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"))


def prefix_cache_rows(run: Run, wins: list[Any]) -> list[dict[str, Any]]:
    """One row per steady window: hits, queries (tokens) and the hit rate; [] without the counters."""
    sm = run.server_metrics
    if sm is None:
        return []
    pair = next(((h, q) for h, q in _NAMES if sm.value(h) is not None and sm.value(q) is not None), None)
    if pair is None:
        return []
    hits, queries = sm.series[pair[0]], sm.series[pair[1]]
    t = sm.scraped_at_s
    rows = []
    for w in wins:
        row: dict[str, Any] = {"step_index": w.index, "step_name": w.name, "prefix_cache_hits_tokens": None,
                               "prefix_cache_queries_tokens": None, "prefix_cache_hit_rate": None}
        rows.append(row)
        if w.start_s is None or w.end_s is None:
            continue
        before, after = np.nonzero(t <= w.start_s)[0], np.nonzero(t >= w.end_s)[0]
        i0 = int(before[-1]) if before.size else 0
        i1 = int(after[0]) if after.size else t.size - 1
        if i1 <= i0:
            continue
        dh, dq = float(hits[i1] - hits[i0]), float(queries[i1] - queries[i0])
        if np.isnan(dh) or np.isnan(dq) or dh < 0 or dq < 0:
            continue
        row["prefix_cache_hits_tokens"] = dh
        row["prefix_cache_queries_tokens"] = dq
        row["prefix_cache_hit_rate"] = dh / dq if dq > 0 else None
    return rows
