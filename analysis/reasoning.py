"""Two-phase statistics of reasoning streams: time to first reasoning/answer token, ITL per phase.

Only requests whose record has ``reasoning_chunks`` (a reasoning stream) take part. Chunk ``i``
of such a request is reasoning iff ``i < reasoning_chunks`` (reasoning precedes the answer in
every API that streams it); the gap from the last reasoning chunk to the first answer chunk
belongs to neither phase (it is the switch, seen in ``first_answer_token_ms``). Per-phase ITL
follows the glossary's ITL definition (a chunk of ``n`` tokens after gap ``g``: ``n`` samples
of ``g / n``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tokenswarm import names
from tokenswarm.analysis.chunks import chunk_parts
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.stats import describe, describe_parts


def has_reasoning(run: Run) -> bool:
    """Whether any record of the run is a reasoning stream."""
    col = run.columns.get("reasoning_chunks")
    return col is not None and bool((~np.isnan(col)).any())


def reasoning_block(run: Run, ok: np.ndarray) -> dict[str, Any]:
    """Row keys of the successful reasoning streams in ``ok`` (see the module docstring)."""
    rc_all = run.columns["reasoning_chunks"]
    sel = ok & ~np.isnan(rc_all)
    out: dict[str, Any] = {"reasoning_streams_count": int(sel.sum())}
    for metric in (names.FIRST_REASONING_TOKEN, names.FIRST_ANSWER_TOKEN):
        v = run[metric.term][sel]  # the record field of the same name
        out.update(describe(v[~np.isnan(v)], metric))
    r_tok = run["reasoning_tokens"][sel]
    out["reasoning_tokens_count"] = float(np.nansum(r_tok)) if sel.any() else None
    # Position of every gap within its request, and the request's reasoning chunk count.
    n_gaps = run.n_gaps
    gm = np.repeat(sel, n_gaps)
    ng = n_gaps[sel]
    starts = np.repeat(np.cumsum(ng) - ng, ng)
    pos = np.arange(int(ng.sum())) - starts  # gap j lies between chunks j and j + 1
    rc = np.repeat(rc_all[sel], ng)
    exact = np.repeat(run["has_chunk_tokens"][sel], ng)
    gaps, toks = run.gap_ms[gm], run.gap_tokens[gm]
    # a phase's first gap starts its deliveries anew (metrics.itl_samples)
    for phase, keep, first in ((names.REASONING_ITL, pos + 1 < rc, pos == 0), (names.ANSWER_ITL, pos >= rc, pos == rc)):
        itl, _, _ = chunk_parts({"gap_ms": gaps[keep], "gap_tokens": toks[keep], "exact": exact[keep],
                                 "first_gap": first[keep]})
        out.update(describe_parts(itl, phase))
    return out
