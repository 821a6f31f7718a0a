"""What a study needs of each run beyond its cells: generator health, GPU cost, observability.

Per run of a study (one arm, one round), from the same computations as ``tokenswarm report``:

* generator health (:func:`analysis.health.generator_health`): a run whose generator was
  overloaded -- delays that were in the figures, the red banner of the per-run report --
  makes the cells it feeds *suspect*: every cell of the steps named in ``overloaded_steps``,
  or every cell of the run when the overload is not tied to steps;
* resource cost per step (:func:`analysis.resources.resources`): GPU memory, power,
  tokens per joule, cost per 1M good output tokens. GPU readings belong to a step (all tasks
  share the GPU), so a task row carries its step's figures;
* the observability audit (:func:`analysis.observability.audit`): which signals the arm's
  server exposes;
* whether the run speculated at all (any spec-decode signal).

No I/O here; :mod:`analysis.study_load` calls :func:`run_extras` once per loaded run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tokenswarm.analysis import cost as cost_mod
from tokenswarm.analysis.health import generator_health
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.observability import SPEC_SIGNALS, audit
from tokenswarm.analysis.per_request import good_mask
from tokenswarm.analysis.resources import resource_sentence, resources
from tokenswarm.analysis.specdecode import spec_decode_tables
from tokenswarm.analysis.tables import step_table

#: The per-step resource figures a study cell carries (candidate, baseline and their ratio).
RESOURCE_FIGURES: tuple[str, ...] = ("gpu_memory_used_mib_max", "gpu_power_w_mean", "output_tokens_per_joule",
                                     "cost_per_1m_good_output_tokens_usd")


@dataclass
class RunExtras:
    """One run's health, per-step resources (by ``(kind, load)``), audit and speculation flag."""

    overloaded: bool
    overloaded_steps: list[str] | None  #: ``None`` with ``overloaded``: the whole run
    health_messages: list[str]
    step_names: dict[tuple[str, float], str]
    resources: dict[tuple[str, float], dict[str, Any]]
    gpu_observed: bool
    observability: list[dict[str, Any]]
    speculated: bool

    def suspect(self, kind: str, load: float) -> bool:
        """True when the step ``(kind, load)`` of this run is fed by an overloaded generator."""
        if not self.overloaded:
            return False
        return self.overloaded_steps is None or self.step_names.get((kind, load)) in self.overloaded_steps

    def reason(self) -> str:
        """The first health message that explains the overload (for the study's notes)."""
        picked = [m for m in self.health_messages if "lag" in m or "CPU" in m or "late" in m]
        return (picked or self.health_messages or ["generator overloaded"])[0]


def run_extras(run: Run) -> RunExtras:
    """Health, resources, audit and speculation of one study run."""
    tables = step_table(run)
    health = generator_health(run.manifest, tables.rows, run.warnings)
    names = {(str(w.kind), float(w.target)): w.name for w in tables.windows if w.target is not None}
    res = resources(run, tables.windows, tables.rows, cost_mod.price(run.manifest), good_mask(run, tables.slo))
    by_load = {}
    for r in res["rows"]:
        for key, name in names.items():
            if name == r["step_name"]:
                by_load[key] = r
    spec = spec_decode_tables(run, tables.windows)
    return RunExtras(overloaded=bool(health["overloaded"]), overloaded_steps=health.get("overloaded_steps"),
                     health_messages=list(health["messages"]), step_names=names, resources=by_load,
                     gpu_observed=bool(res["observed"]),
                     observability=audit(run, tables.windows, speculation_seen=spec["observed"]),
                     speculated=bool(spec["observed"]))


def _mean(values: list[Any]) -> float | None:
    v = [float(x) for x in values if x is not None]
    return float(np.mean(v)) if v else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def cell_resources(cand: list[RunExtras], base: list[RunExtras], key: tuple[str, float],
                   aggregate_speedup: float | None, enough: bool = True) -> dict[str, Any]:
    """The resource cost of one cell: means over rounds of each side, their deltas and ratios,
    and the sentence "2.40x tokens/s for +3.1 GiB and +18 % power -> 2.00x tokens per joule".

    Without ``enough`` requests (the cell's speedup is withheld) the token-based ratios (tokens
    per joule, cost per good token) are withheld too: they are throughput ratios in disguise.
    The GPU readings (memory, power) do not rest on requests and stay.
    """
    out: dict[str, Any] = {}
    for side, runs in (("candidate", cand), ("baseline", base)):
        for fig in RESOURCE_FIGURES:
            out[f"{side}_{fig}"] = _mean([(x.resources.get(key) or {}).get(fig) for x in runs])
    mc, mb = out["candidate_gpu_memory_used_mib_max"], out["baseline_gpu_memory_used_mib_max"]
    pc, pb = out["candidate_gpu_power_w_mean"], out["baseline_gpu_power_w_mean"]
    out["gpu_memory_used_mib_delta"] = mc - mb if mc is not None and mb is not None else None
    out["gpu_power_w_delta"] = pc - pb if pc is not None and pb is not None else None
    out["gpu_power_change_share"] = (pc - pb) / pb if pc is not None and pb else None
    out["output_tokens_per_joule_ratio"] = _ratio(out["candidate_output_tokens_per_joule"],
                                                  out["baseline_output_tokens_per_joule"])
    out["cost_per_1m_good_output_tokens_ratio"] = _ratio(out["candidate_cost_per_1m_good_output_tokens_usd"],
                                                         out["baseline_cost_per_1m_good_output_tokens_usd"])
    if not enough:
        out["output_tokens_per_joule_ratio"] = out["cost_per_1m_good_output_tokens_ratio"] = None
    observed = any(out[f"{s}_{f}"] is not None for s in ("candidate", "baseline") for f in RESOURCE_FIGURES)
    out["resources_observed"] = observed
    sentence_row = {**out, "output_tokens_per_s_ratio": aggregate_speedup}
    # the sentence only when a GPU figure is known: "x tokens/s" alone is the speedup column
    out["resource_summary_text"] = resource_sentence(sentence_row) if observed else None
    return out


def arm_observability(extras: list[RunExtras]) -> list[dict[str, Any]]:
    """An arm's audit: a signal counts as exposed when any of the arm's runs exposed it.

    An arm that never speculated cannot expose the speculative signals: they are not
    applicable (``exposed`` ``None``), not missing.
    """
    if not extras:
        return []
    speculated = any(x.speculated for x in extras)
    out = []
    for i, sig in enumerate(extras[0].observability):
        seen = [x.observability[i] for x in extras if i < len(x.observability)]
        exposed = [s for s in seen if s["exposed"]]
        first = exposed[0] if exposed else sig
        applicable = speculated or sig["signal"] not in SPEC_SIGNALS or bool(exposed)
        out.append({"signal": sig["signal"], "exposed": bool(exposed) if applicable else None,
                    "metric": first.get("metric"),
                    "derived_instead": None if exposed or not applicable else sig.get("derived_instead")})
    return out
