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

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from tokenswarm.analysis.samples import percentile_of, shortfall
from tokenswarm.manifest import RunManifest
from tokenswarm.metrics import SLO_METRICS, slo_name

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
    for old, value in block.items():
        name = slo_name(old, f"{where}.{old}")
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
    #: with ``not_enough_samples``: the row's n and what the percentile needs
    samples_count: int | None = None
    samples_needed_count: int | None = None

    @property
    def label(self) -> str:
        """PASS, FAIL, or "not judged (n=12, needs 200)" (unjudged checks never read FAIL)."""
        if self.not_enough_samples:
            return judged_label(self.samples_count, self.samples_needed_count)
        return "PASS" if self.passed else "FAIL"

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
            "samples_count": self.samples_count,
            "samples_needed_count": self.samples_needed_count,
            "label": self.label,
        }


def judged_label(n: int | None, need: int | None) -> str:
    """The label of an SLO check its sample count cannot support."""
    return f"not judged (n={n}, needs {need})"


def need_of_p(column: str) -> float:
    """The percentile of a percentile column (``ttft_p95_ms`` -> 95)."""
    pc = percentile_of(column)
    assert pc is not None
    return pc[1]


def _too_few_samples(row: Mapping[str, Any], column: str) -> tuple[str, int, int] | None:
    """Why a percentile column cannot be judged (the rule of :mod:`analysis.samples`):
    ``(detail, n, need)``, or ``None`` when it can."""
    short = shortfall(row, column)
    if short is None:
        return None
    n, need = short
    p = need_of_p(column)
    return f"not judged, not enough samples: {column} from n={n}, a p{p:g} needs n >= {need} (10 / (1 - q))", n, need


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
                passed, detail, observed = False, short[0], None
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
                    samples_count=short[1] if short else None,
                    samples_needed_count=short[2] if short else None,
                )
            )
    return results


def scenario_slos(manifest: RunManifest) -> SloSpec:
    """The SLO block of a run's scenario (``manifest.scenario.slo``), validated."""
    return parse_slos(manifest.scenario_dict.get("slo"), "manifest.scenario.slo")
