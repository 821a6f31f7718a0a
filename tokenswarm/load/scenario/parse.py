"""Reading a scenario: YAML file, command-line overrides, validation, :class:`Scenario`.

:func:`load_scenario` reads a file (a YAML error names its line), applies dotted-path
overrides (:func:`parse_override`, :func:`apply_overrides`), validates with
:func:`parse_scenario` and checks that the named datasets load. :func:`parse_scenario`
rejects literal secrets first, then hands each section to its parser in
:mod:`tokenswarm.load.scenario.sections`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from tokenswarm.load.scenario.credentials import _reject_literal_secrets
from tokenswarm.load.scenario.errors import ScenarioError
from tokenswarm.load.scenario.fields import _Section
from tokenswarm.load.scenario.model import CostConfig, Scenario
from tokenswarm.load.scenario.sections import _parse_load, _parse_slo, _parse_target, _parse_traffic

_TOP = ("name", "description", "target", "traffic", "load", "slo", "cost")
_COST = ("gpu_hour_usd", "gpus")


def parse_override(text: str) -> tuple[str, Any]:
    """Parse a ``dotted.path=value`` command-line override; the value is read as YAML."""
    if "=" not in text:
        raise ValueError(f"override {text!r}: expected dotted.path=value")
    key, _, value = text.partition("=")
    return key.strip(), yaml.safe_load(value) if value.strip() else None


def apply_overrides(data: dict, overrides: dict | None, file: str = "<scenario>") -> dict:
    """Return a copy of ``data`` with dotted-path ``overrides`` set (intermediate mappings created)."""
    import copy

    out = copy.deepcopy(data)
    for dotted, value in (overrides or {}).items():
        parts = str(dotted).split(".")
        node = out
        for i, part in enumerate(parts[:-1]):
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ScenarioError(file, ".".join(parts[: i + 1]), f"a mapping to override {dotted}", nxt)
            node = nxt
        node[parts[-1]] = value
    return out


def load_scenario(path: str | os.PathLike, overrides: dict | None = None) -> Scenario:
    """Read, override and validate a scenario file (including its datasets and tokenizer).

    Raises :class:`ScenarioError` for a missing file, invalid YAML (with its line number) and
    every invalid field.
    """
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(file, "file", "an existing scenario file", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(file, "file", "a readable UTF-8 YAML file", str(exc)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "file"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        ctx, ctx_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if ctx and ctx_mark is not None and mark is not None and ctx_mark.line != mark.line:
            problem = f"{problem} ({ctx} at line {ctx_mark.line + 1})"
        raise ScenarioError(file, where, "valid YAML", problem) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(
            file, "(top level)", "a mapping of sections (name, target, traffic, load, ...)", data
        )
    data = apply_overrides(data, overrides, file)
    scenario = parse_scenario(data, source=file)
    _check_datasets(scenario)
    return scenario


def _check_datasets(scenario: Scenario) -> None:
    from tokenswarm.load.corpora.datasets import load_dataset  # here: corpora imports this package

    for task in scenario.traffic.classes:
        if task.dataset is not None:
            load_dataset(task.dataset.path, task.dataset.format)


def _with_replay_class(data: dict) -> dict:
    """Replay needs no traffic classes: without any, one ``replay`` class carries sampling/extra_body."""
    traffic = data.get("traffic")
    if isinstance(traffic, dict) and traffic.get("classes"):
        return data
    traffic = dict(traffic) if isinstance(traffic, dict) else {}
    traffic["classes"] = {"replay": {"kind": "qa"}}
    return {**data, "traffic": traffic}


def parse_scenario(data: dict, source: str = "<scenario>") -> Scenario:
    """Validate a parsed YAML mapping; relative paths resolve against ``source``'s folder, then cwd."""
    file = source
    base_dir = Path(source).parent if source and os.path.isfile(source) else Path.cwd()
    _reject_literal_secrets(data, "", file)
    top = _Section(data, "", file, _TOP)
    default_name = Path(source).stem if source and not source.startswith("<") else "scenario"
    name = top.str_("name", default_name)
    description = top.str_("description", "")
    target = _parse_target(top, file)
    load = _parse_load(top, base_dir)
    if load.mode == "replay":
        top = _Section(_with_replay_class(data), "", file, _TOP)
    traffic = _parse_traffic(top, file, base_dir, target.extra_body)
    slo = _parse_slo(top, file, {t.name for t in traffic.classes})
    cost = None
    if top.has("cost"):
        c = top.section("cost", _COST)
        if not c.has("gpu_hour_usd"):
            raise c.err("gpu_hour_usd", "a number > 0")
        cost = CostConfig(c.num("gpu_hour_usd", None, gt=0), c.num("gpus", 1, ge=1, integer=True))
    return Scenario(
        name, description, source if os.path.isfile(source) else None, target, traffic, load, slo, cost
    )
