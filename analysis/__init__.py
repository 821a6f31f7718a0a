"""Analysis of tokenswarm run directories: tables, curves, comparisons and reports.

Reads only run directories (docs/running-load.md). The computing core (``loader``, ``tables``,
``slo``, ``curves``, ``specdecode``, ``compare``, ``cost``, ``soak``, ``summary``) does no printing;
reporters (``report``, ``render_*``, ``plots``) turn a summary into files.

Notebook use::

    from tokenswarm import analysis
    run = analysis.load_run("runs/20261130-052233-ab12")
    tables = analysis.step_table(run, slo={"ttft_p95_ms": 800})
    tables.rows[0]["ttft_p99_ms"]
    analysis.evaluate(tables, {"ttft_p95_ms": 800})
"""

from __future__ import annotations

from tokenswarm.analysis import slo
from tokenswarm.analysis.compare import compare_runs, consistency
from tokenswarm.analysis.cost import cost_rows, price
from tokenswarm.analysis.curves import curves
from tokenswarm.analysis.errors import AnalysisError, NoSuccessError, NotComparableError, RunInputError
from tokenswarm.analysis.loader import Run, load_run
from tokenswarm.analysis.slo import SloResult, SloSpec, parse_slos
from tokenswarm.analysis.soak import soak
from tokenswarm.analysis.specdecode import spec_decode_tables
from tokenswarm.analysis.summary import analyse, compare_summary
from tokenswarm.analysis.tables import StepTables, derived, evaluate, step_table, windows

__all__ = [
    "AnalysisError",
    "NoSuccessError",
    "NotComparableError",
    "Run",
    "RunInputError",
    "SloResult",
    "SloSpec",
    "StepTables",
    "analyse",
    "compare_runs",
    "compare_summary",
    "consistency",
    "cost_rows",
    "curves",
    "derived",
    "evaluate",
    "load_run",
    "parse_slos",
    "price",
    "slo",
    "soak",
    "spec_decode_tables",
    "step_table",
    "windows",
]
