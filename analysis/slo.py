"""Service-level objectives: parsing, per-request goodput criteria and evaluation.

An SLO block (``manifest.scenario.slo`` or ``--slo``) looks like::

    {"ttft_p95_ms": 800, "tpot_p99_ms": 60, "error_rate": 0.01,
     "per_task": {"code": {"ttft_p95_ms": 1000}}}

Top-level thresholds apply to the all-tasks row of every step and to every task row;
``per_task`` overrides them for one task. Goodput counts a request as *good* when it
succeeded and meets the per-request thresholds ``ttft_ms``, ``tpot_ms`` and ``e2e_ms``
(vLLM ``--goodput`` style). Those are given explicitly, or derived from the percentile SLOs
of the same metric: the loosest (largest) ``ttft_pNN_ms`` becomes ``ttft_ms``, since every
single request should at least meet the tail bound.

:func:`evaluate_rows` checks step-table rows; the public evaluator of a run or its tables,
``analysis.evaluate``, lives in :mod:`analysis.tables` (this module sits below the tables, so
that the two never import each other).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from tokenswarm.analysis.stats import min_samples_for
from tokenswarm.metrics import SLO_METRICS

#: Per-request goodput thresholds (not row SLOs).
REQUEST_THRESHOLDS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "e2e_ms")
ALL_TASKS = "all"


@dataclass(frozen=True)
class SloSpec:
    """Validated SLO thresholds: ``overall`` plus per-task overrides."""

    overall: Mapping[str, float] = field(default_factory=dict)
    per_task: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.overall) or any(self.per_task.values())

    def for_task(self, task: str) -> dict[str, float]:
        """Thresholds of one row: ``overall`` merged with ``per_task[task]`` (``all`` = overall)."""
        out = dict(self.overall)
        if task != ALL_TASKS:
            out.update(self.per_task.get(task, {}))
        return out

    def request_thresholds(self, task: str) -> dict[str, float]:
        """Per-request goodput thresholds (``ttft_ms``/``tpot_ms``/``e2e_ms``) for a task."""
        merged = self.for_task(task)
        out: dict[str, float] = {}
        for key in REQUEST_THRESHOLDS:
            if key in merged:
                out[key] = merged[key]
                continue
            metric = key[: -len("_ms")]
            derived = [v for name, v in merged.items() if name.startswith(metric + "_p") and name.endswith("_ms")]
            if derived:
                out[key] = max(derived)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (as it would appear in a scenario)."""
        out: dict[str, Any] = dict(self.overall)
        if self.per_task:
            out["per_task"] = {k: dict(v) for k, v in self.per_task.items()}
        return out


def _check_block(block: Any, where: str) -> dict[str, float]:
    if not isinstance(block, Mapping):
        raise ValueError(f"{where}: expected a mapping of SLO name to threshold, got {type(block).__name__}")
    out: dict[str, float] = {}
    for name, value in block.items():
        if name not in SLO_METRICS and name not in REQUEST_THRESHOLDS:
            known = ", ".join(list(SLO_METRICS) + list(REQUEST_THRESHOLDS))
            raise ValueError(f"{where}.{name}: unknown SLO name (known: {known})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}.{name}: expected a number, got {value!r}")
        out[name] = float(value)
    return out


def parse_slos(obj: Any, where: str = "slo") -> SloSpec:
    """Validate an SLO block (see module docstring); ``None``/``{}`` gives an empty spec.

    Raises ``ValueError`` naming the dotted field (``slo.per_task.code.ttft_p95_ms``).
    """
    if obj is None:
        return SloSpec()
    if isinstance(obj, SloSpec):
        return obj
    if not isinstance(obj, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(obj).__name__}")
    top = {k: v for k, v in obj.items() if k != "per_task"}
    per_task_raw = obj.get("per_task") or {}
    if not isinstance(per_task_raw, Mapping):
        raise ValueError(f"{where}.per_task: expected a mapping of task name to SLO block")
    per_task = {task: _check_block(block, f"{where}.per_task.{task}") for task, block in per_task_raw.items()}
    return SloSpec(overall=_check_block(top, where), per_task=per_task)


@dataclass(frozen=True)
class SloResult:
    """One SLO checked on one row (a step and a task, or ``all`` tasks)."""

    name: str
    threshold: float
    observed: float | None
    passed: bool
    step_index: int | None
    step_name: str
    task: str
    comparison: str  #: "<=" or ">="
    unit: str
    detail: str = ""
    #: the percentile rests on too few samples (n < 10 / (1 - q)): not judged, counted as not passed
    not_enough_samples: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (units in key names)."""
        return {
            "slo_name": self.name,
            "threshold_value": self.threshold,
            "observed_value": self.observed,
            "unit": self.unit,
            "comparison": self.comparison,
            "passed": self.passed,
            "step_index": self.step_index,
            "step_name": self.step_name,
            "task": self.task,
            "detail": self.detail,
            "not_enough_samples": self.not_enough_samples,
        }


_PERCENTILE_COLUMN = re.compile(r"^(?P<metric>[a-z_]+?)_p(?P<p>\d+(?:_\d+)?)_ms$")


def _too_few_samples(row: Mapping[str, Any], column: str) -> str | None:
    """Why a percentile column cannot be judged (sample-size guard), or ``None`` when it can."""
    m = _PERCENTILE_COLUMN.match(column)
    if m is None:
        return None
    n = row.get(f"{m.group('metric')}_count")
    p = float(m.group("p").replace("_", "."))
    need = min_samples_for(p)
    if n is None or n >= need:
        return None
    return f"not enough samples: {column} from n={n}, a p{p:g} needs n >= {need} (10 / (1 - q))"


def evaluate_rows(rows: Sequence[Mapping[str, Any]], slos: SloSpec) -> list[SloResult]:
    """Check every applicable SLO on every step-table row."""
    results: list[SloResult] = []
    for row in rows:
        task = row["task"]
        for name, threshold in slos.for_task(task).items():
            if name not in SLO_METRICS:
                continue  # per-request thresholds feed goodput, they are not row checks
            column, direction, unit = SLO_METRICS[name]
            observed = row.get(column)
            short = None if observed is None else _too_few_samples(row, column)
            if short is not None:
                passed, detail, observed = False, short, None
            elif observed is None:
                passed, detail = False, f"{column} not observed in this row (no eligible requests)"
            elif direction == "max":
                passed, detail = observed <= threshold, ""
            else:
                passed, detail = observed >= threshold, ""
            results.append(
                SloResult(
                    name=name,
                    threshold=threshold,
                    observed=None if observed is None else float(observed),
                    passed=bool(passed),
                    step_index=row.get("step_index"),
                    step_name=row.get("step_name", ""),
                    task=task,
                    comparison="<=" if direction == "max" else ">=",
                    unit=unit,
                    detail=detail,
                    not_enough_samples=short is not None,
                )
            )
    return results


def scenario_slos(manifest: Mapping[str, Any]) -> SloSpec:
    """The SLO block of a run's scenario (``manifest.scenario.slo``), validated."""
    scenario = manifest.get("scenario") or {}
    return parse_slos(scenario.get("slo") if isinstance(scenario, Mapping) else None, "manifest.scenario.slo")
