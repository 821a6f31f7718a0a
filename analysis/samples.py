"""The one sample-size rule, applied to every table, plot, knee, interval and SLO check.

A q-quantile needs n >= 10 / (1 - q) samples (:func:`analysis.stats.min_samples_for`: p50 20,
p95 200, p99 1,000, p99.9 10,000): below that the estimate rests on fewer than ten values in
the tail. A figure below its need is never a number: tables print ``n<NEED``, curves and plots
leave the point out, the knee finder does not see it, an SLO check on it is "not judged", and
a ratio or interval built on it is left out. A median-based figure (per-request tokens/s p50,
a speedup, a goodput ratio) needs what the median needs, :data:`MEDIAN_NEED`.

Percentile columns are named ``{metric}_p{NN}_{unit}`` (``ttft_p99_ms``, ``e2e_p99_9_ms``,
``request_output_tps_p50_tokens_per_s``) and their row holds ``{metric}_count``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from tokenswarm.analysis.stats import min_samples_for

#: What a median (and so any ratio of medians, or a rate compared between runs) needs.
MEDIAN_NEED = min_samples_for(50.0)

#: ``ttft_p99_ms`` -> (ttft, 99); the metric may hold digits (``e2e``).
PERCENTILE_COLUMN = re.compile(r"^(?P<metric>[a-z0-9_]+?)_p(?P<p>\d+(?:_\d+)?)_(?:ms|tokens_per_s)$")

#: How a figure below its need is shown in a table (never a number).
SHORT_PREFIX = "n<"


def percentile_of(column: str) -> tuple[str, float] | None:
    """``(metric, p)`` of a percentile column name, ``None`` for any other column."""
    m = PERCENTILE_COLUMN.match(column)
    if m is None:
        return None
    return m.group("metric"), float(m.group("p").replace("_", "."))


def need_of(column: str) -> int | None:
    """Samples the column's percentile needs, ``None`` when it is not a percentile."""
    pc = percentile_of(column)
    return None if pc is None else min_samples_for(pc[1])


def shortfall(row: Mapping[str, Any], column: str) -> tuple[int, int] | None:
    """``(n, need)`` when the row's count cannot support the percentile column, else ``None``.

    A row with no samples (count 0 or missing) is "not observed", not short: its value is
    ``None`` already and shows as a dash.
    """
    pc = percentile_of(column)
    if pc is None:
        return None
    n = row.get(f"{pc[0]}_count")
    need = min_samples_for(pc[1])
    if isinstance(n, int) and not isinstance(n, bool) and 0 < n < need:
        return n, need
    return None


def supported(row: Mapping[str, Any], column: str) -> bool:
    """True when the row's value of ``column`` may be shown, plotted or compared."""
    return shortfall(row, column) is None


def short_text(need: int) -> str:
    """The table cell of a figure below its need: ``n<200``."""
    return f"{SHORT_PREFIX}{need}"


def is_short_cell(cell: str) -> bool:
    """True for a table cell written by :func:`short_text`."""
    return cell.startswith(SHORT_PREFIX)


def guard_values(row: Mapping[str, Any], columns: Sequence[str]) -> tuple[dict[str, Any], dict[str, int]]:
    """The row's ``columns`` with every unsupported percentile set to ``None``, and what each needed.

    Returns ``(values, short)`` where ``short`` maps a left-out column to the samples it needs.
    Curves, plots and the knee finder read ``values``, so a point below its need is not drawn
    and no knee rests on it.
    """
    values: dict[str, Any] = {}
    short: dict[str, int] = {}
    for c in columns:
        s = shortfall(row, c)
        if s is None:
            values[c] = row.get(c)
        else:
            values[c] = None
            short[c] = s[1]
    return values, short


def prune_short_columns(headers: list[str], rows: list[list[str]], keep: int = 1
                        ) -> tuple[list[str], list[list[str]], str | None]:
    """Leave out the columns whose every row is below its need (``n<N``), with a note saying so.

    The first ``keep`` columns (the row labels) always stay. A column with at least one
    judged cell stays whole: its short cells keep saying ``n<N``.
    """
    if not rows:
        return headers, rows, None
    drop: list[int] = []
    needs: list[str] = []
    for i in range(keep, len(headers)):
        cells = [r[i] for r in rows]
        if all(is_short_cell(c) or c in ("—", "-") for c in cells) and any(is_short_cell(c) for c in cells):
            drop.append(i)
            need = next(c for c in cells if is_short_cell(c))[len(SHORT_PREFIX):]
            needs.append(f"{headers[i]} (needs n >= {need})")
    if not drop:
        return headers, rows, None
    keep_idx = [i for i in range(len(headers)) if i not in drop]
    note = ("Left out, too few samples in every row: " + ", ".join(needs)
            + ". A percentile needs n >= 10 / (1 - q) samples.")
    return [headers[i] for i in keep_idx], [[r[i] for i in keep_idx] for r in rows], note
