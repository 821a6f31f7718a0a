"""Analysis of tokenswarm run directories: tables, curves, comparisons and reports.

Reads only run directories (docs/running-load.md). The computing core (``loader``, ``per_request``,
``step_windows``, ``tables``, ``slo``, ``curves``, ``specdecode``, ``compare``, ``cost``, ``soak``,
``summary``) does no printing; reporters (``report``, ``render_*``, ``plots``) turn a summary into
files.

Notebook use::

    from tokenswarm import analysis
    run = analysis.load_run("runs/20261130-052233-ab12")
    tables = analysis.step_table(run, slo={"ttft_p95_ms": 800})
    tables.rows[0]["ttft_p99_ms"]
    analysis.evaluate(tables, {"ttft_p95_ms": 800})
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below are imported on first use (see __getattr__)
    from tokenswarm.analysis import slo
    from tokenswarm.analysis.compare import compare_runs, consistency
    from tokenswarm.analysis.cost import cost_rows, price
    from tokenswarm.analysis.curves import curves
    from tokenswarm.analysis.errors import AnalysisError, NoSuccessError, NotComparableError, RunInputError
    from tokenswarm.analysis.loader import Run, load_run
    from tokenswarm.analysis.per_request import derived
    from tokenswarm.analysis.slo import SloResult, SloSpec, parse_slos
    from tokenswarm.analysis.soak import soak
    from tokenswarm.analysis.specdecode import spec_decode_tables
    from tokenswarm.analysis.step_windows import windows
    from tokenswarm.analysis.summary import analyse, compare_summary
    from tokenswarm.analysis.tables import StepTables, evaluate, step_table

#: Where each public name lives. Importing the package imports none of them: the generator's
#: end-of-run verdict needs the loader and the SLO tables, not compare, curves or reports.
_HOMES = {
    "slo": "slo",
    "compare_runs": "compare", "consistency": "compare",
    "cost_rows": "cost", "price": "cost",
    "curves": "curves",
    "AnalysisError": "errors", "NoSuccessError": "errors", "NotComparableError": "errors", "RunInputError": "errors",
    "Run": "loader", "load_run": "loader",
    "derived": "per_request",
    "SloResult": "slo", "SloSpec": "slo", "parse_slos": "slo",
    "soak": "soak",
    "spec_decode_tables": "specdecode",
    "windows": "step_windows",
    "analyse": "summary", "compare_summary": "summary",
    "StepTables": "tables", "evaluate": "tables", "step_table": "tables",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{home}")
    value = module if name == "slo" else getattr(module, name)  # slo: the module itself
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


#: Public functions named like the module they live in (``analysis.curves``, ``analysis.soak``).
_FUNCTIONS_NAMED_LIKE_MODULES = frozenset(n for n, home in _HOMES.items() if n == home and n != "slo")


class _Package(types.ModuleType):
    """Keeps ``analysis.curves`` the function when its module is first imported.

    Importing a submodule sets it as an attribute of its package; imported eagerly, the
    package's own ``from ... import curves`` ran after that and won. Imported lazily, the
    submodule would come last and replace the function, so that one setattr is refused.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FUNCTIONS_NAMED_LIKE_MODULES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
