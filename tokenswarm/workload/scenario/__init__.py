"""Scenario files: one YAML file describes a run (target, traffic mix, load steps, SLOs, cost).

:func:`load_scenario` reads and validates a file into a frozen :class:`Scenario`. Every
validation error is a :class:`ScenarioError` whose message names the file, the dotted field
path and what was expected, e.g.::

    scenarios/mix.yaml: traffic.classes.qa.weight: expected a number >= 0, got -1

The CLI turns a ``ScenarioError`` into exit status 2 before any traffic is sent. The schema
is documented field by field in docs/scenarios.md and docs/reference/scenario-schema.md.

Layout: ``model`` (the frozen config dataclasses and allowed values), ``parse`` (file,
overrides, validation), one parser per YAML section: ``target``, ``traffic`` (the classes;
``specbench`` splits a Spec-Bench class by category), ``load`` and ``slo``, with ``body``
(model, sampling and extra_body, read at several levels); ``fields`` (the typed field
reader), ``credentials`` (literal-key rejection, header masking) and ``paths`` (finding
scenario files and the files they name). :class:`ScenarioError` is defined in
:mod:`tokenswarm.workload.errors`, shared with the dataset reader. Import from this package.
"""

from __future__ import annotations

from tokenswarm.workload.errors import ScenarioError, ScenarioErrors
from tokenswarm.workload.scenario.credentials import mask_headers
from tokenswarm.workload.scenario.model import (
    ABNORMAL_CASES,
    APIS,
    ARRIVALS,
    DATASET_FORMATS,
    KINDS,
    LOAD_MODES,
    SLO_NAMES,
    CostConfig,
    DatasetConfig,
    LoadConfig,
    Sampling,
    Scenario,
    SloConfig,
    TargetConfig,
    TaskConfig,
    TrafficConfig,
    UntilConfig,
    metrics_url_for,
)
from tokenswarm.workload.scenario.parse import apply_overrides, load_scenario, parse_override, parse_scenario
from tokenswarm.workload.scenario.paths import resolve_scenario_path, shipped_scenarios_dir
from tokenswarm.workload.scenario.traffic import DEFAULTS

__all__ = [
    "ABNORMAL_CASES",
    "APIS",
    "ARRIVALS",
    "DATASET_FORMATS",
    "DEFAULTS",
    "KINDS",
    "LOAD_MODES",
    "SLO_NAMES",
    "CostConfig",
    "DatasetConfig",
    "LoadConfig",
    "Sampling",
    "Scenario",
    "ScenarioError",
    "ScenarioErrors",
    "SloConfig",
    "TargetConfig",
    "TaskConfig",
    "TrafficConfig",
    "UntilConfig",
    "apply_overrides",
    "load_scenario",
    "mask_headers",
    "metrics_url_for",
    "parse_override",
    "parse_scenario",
    "resolve_scenario_path",
    "shipped_scenarios_dir",
]
