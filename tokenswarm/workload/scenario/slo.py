"""The ``slo`` section: step-level thresholds, for the whole run and per task (``slo.per_task``).

A deprecated SLO name still works, with a warning naming the file, the field and the new name
(:func:`tokenswarm.metrics.slo_name`).
"""

from __future__ import annotations

from tokenswarm.metrics import DEPRECATED_SLO_NAMES, slo_name
from tokenswarm.workload.errors import ScenarioError
from tokenswarm.workload.scenario.fields import _Section
from tokenswarm.workload.scenario.model import SLO_NAMES, SloConfig

#: SLO keys a scenario may write: the current names and the deprecated ones they replace.
_SLO_KEYS = SLO_NAMES + tuple(DEPRECATED_SLO_NAMES)


def _slo_values(sec: _Section, names: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for key in names + tuple(DEPRECATED_SLO_NAMES):
        if not sec.has(key):
            continue
        if key in ("error_rate", "min_goodput_share"):
            value = sec.num(key, None, ge=0, le=1)
        else:
            value = sec.num(key, None, gt=0)
        # an old name (min_output_tps) still works; the warning names the file, the field and the new name
        out[slo_name(key, f"{sec.file}: {sec.at(key)}")] = value
    return out


def _parse_slo(top: _Section, file: str, task_names: set[str]) -> SloConfig:
    sl = top.section("slo", _SLO_KEYS + ("per_task",))
    overall = _slo_values(sl, SLO_NAMES)
    per_task: dict[str, dict[str, float]] = {}
    pt_raw = sl.raw("per_task", {})
    if not isinstance(pt_raw, dict):
        raise sl.err("per_task", "a mapping of task name -> SLOs")
    for tname, vals in pt_raw.items():
        if tname not in task_names:
            raise ScenarioError(
                file,
                sl.at(f"per_task.{tname}"),
                "a task name from traffic.classes (" + ", ".join(sorted(task_names)) + ")",
                tname,
                problem="unknown task",
            )
        per_task[tname] = _slo_values(_Section(vals, sl.at(f"per_task.{tname}"), file, _SLO_KEYS), SLO_NAMES)
    return SloConfig(overall=overall, per_task=per_task)
