"""Per-model step tables: when a run's requests asked for several models (LoRA adapters, a split).

A scenario can spread its requests over several model names by weight (``target.model`` or a
class's ``model`` as ``{name: weight}``); every record carries the model it asked for. With
more than one model among the records, :func:`model_tables` gives one row per step and model
-- the same counts, rates, goodput and latency distributions as the step table's all-tasks
row, over that model's requests of the steady window -- and checks the run's SLOs on each
row, as they are checked on each task's row. With one model it returns ``None``: the step
table already is that model's.

ITL and inter-chunk percentiles come from the raw chunk gaps. A run analysed from chunk
histograms (Parquet stores with histograms) keeps them per step, phase and task, not per
model: those columns are then ``None`` and a note says why. No I/O here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tokenswarm.analysis.chunks import chunk_parts, chunk_subset
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.per_request import derived, good_mask
from tokenswarm.analysis.slo import ALL_TASKS, evaluate_rows
from tokenswarm.analysis.stats import SortedParts
from tokenswarm.analysis.tables import StepTables, counts_block, latency_block

#: Why per-model ITL is missing from a run analysed from chunk histograms.
NO_MODEL_ITL_NOTE = ("Per-model ITL and inter-chunk percentiles: not available, the chunk histograms of this run "
                     "are kept per step, phase and task.")


def model_names(run: Run) -> list[str]:
    """The model names the run's records asked for, sorted (records without one are left out)."""
    if "model" not in run.columns:
        return []
    codes = np.unique(run["model"])
    names = run.categories["model"]
    return sorted(names[c] for c in codes.tolist() if c >= 0)


def model_tables(run: Run, tables: StepTables) -> dict[str, Any] | None:
    """Rows per (step, model) and their SLO results; ``None`` when the run asked for one model."""
    names = model_names(run)
    if len(names) < 2:
        return None
    d = derived(run)
    good = good_mask(run, tables.slo)
    hist_run = run.chunk_hists is not None
    empty = SortedParts.from_values(np.empty(0))
    rows: list[dict[str, Any]] = []
    for w in tables.windows:
        for name in names:
            req = w.mask & (run["model"] == run.code("model", name))
            if not req.any():
                continue
            parts = (empty, empty, None) if hist_run else chunk_parts(chunk_subset(run, req & d["ok"]))
            row: dict[str, Any] = {**w.header(), "task": ALL_TASKS, "model": name,
                                   "window_start_s": w.start_s, "window_end_s": w.end_s}
            row.update(counts_block(run, d, req, w.duration_s, good))
            row.update(latency_block(run, d, req, parts, w.kind == "rate"))
            if hist_run:
                for key in [k for k in row if k.startswith(("itl_", "inter_chunk_"))]:
                    row[key] = None
            rows.append(row)
    results = []
    for row in rows:
        for r in evaluate_rows([row], tables.slo):
            results.append({**r.to_dict(), "model": row["model"]})
    return {"models": names, "rows": rows, "slo_results": results,
            "notes": [NO_MODEL_ITL_NOTE] if hist_run else []}
