"""Reading a scenario: YAML file, command-line overrides, validation, :class:`Scenario`.

:func:`load_scenario` reads a file (a YAML error names its line), applies dotted-path
overrides (:func:`parse_override`, :func:`apply_overrides`), validates with
:func:`parse_scenario` and checks that the named datasets load. :func:`parse_scenario`
rejects literal secrets first, then hands each section to its parser: ``target``, ``traffic``
(with ``specbench``), ``load`` and ``slo``, each a module of this package that reads its section
through a :class:`~tokenswarm.workload.scenario.fields._Section` knowing the section's field
names and returns the frozen config of :mod:`tokenswarm.workload.scenario.model`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tokenswarm.workload.corpora.datasets import load_dataset
from tokenswarm.workload.errors import ScenarioError, ScenarioErrors
from tokenswarm.workload.scenario.credentials import _reject_literal_secrets
from tokenswarm.workload.scenario.fields import _Section, collecting_unknown_fields
from tokenswarm.workload.scenario.load import _parse_load
from tokenswarm.workload.scenario.model import CostConfig, Scenario
from tokenswarm.workload.scenario.slo import _parse_slo
from tokenswarm.workload.scenario.target import _parse_target
from tokenswarm.workload.scenario.traffic import _parse_traffic
from tokenswarm.workload.scenario.yamlsafe import MAX_EXPANDED_NODES, YamlTooLarge, load_bounded, load_plain

_TOP = ("name", "description", "target", "traffic", "load", "slo", "cost")
_COST = ("gpu_hour_usd", "gpus")


def parse_override(text: str) -> tuple[str, Any]:
    """Parse a ``dotted.path=value`` command-line override; the value is read as YAML."""
    if "=" not in text:
        raise ValueError(f"override {text!r}: expected dotted.path=value")
    key, _, value = text.partition("=")
    return key.strip(), load_plain(value) if value.strip() else None


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any] | None, file: str = "<scenario>") -> dict[str, Any]:
    """Return a copy of ``data`` with dotted-path ``overrides`` set (intermediate mappings created)."""
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


def load_scenario(path: str | os.PathLike[str], overrides: dict[str, Any] | None = None) -> Scenario:
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
        data = load_bounded(text)
    except YamlTooLarge as exc:
        raise ScenarioError(file, f"line {exc.line}, column {exc.column}",
                            f"at most {MAX_EXPANDED_NODES} values once aliases are expanded", exc.got,
                            problem=exc.problem) from None
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
    for task in scenario.traffic.classes:
        if task.dataset is not None:
            load_dataset(task.dataset.path, task.dataset.format, task.dataset.category)


def _with_replay_class(data: dict[str, Any]) -> dict[str, Any]:
    """Replay needs no traffic classes: without any, one ``replay`` class carries sampling/extra_body."""
    traffic = data.get("traffic")
    if isinstance(traffic, dict) and traffic.get("classes"):
        return data
    traffic = dict(traffic) if isinstance(traffic, dict) else {}
    traffic["classes"] = {"replay": {"kind": "qa"}}
    return {**data, "traffic": traffic}


def parse_scenario(data: dict[str, Any], source: str = "<scenario>") -> Scenario:
    """Validate a parsed YAML mapping; relative paths resolve against ``source``'s folder, then cwd.

    Every unknown field in the file and the first invalid value of each section (``target``,
    ``traffic``, ``load``, ``slo``, ``cost``) are reported together: one problem raises a
    :class:`ScenarioError`, several a :class:`ScenarioErrors` listing each.
    """
    file = source
    base_dir = Path(source).parent if source and os.path.isfile(source) else Path.cwd()
    _reject_literal_secrets(data, "", file)
    problems: list[ScenarioError] = []

    def attempt(parse_section: Callable[[], Any]) -> Any:
        try:
            return parse_section()
        except ScenarioErrors as exc:
            problems.extend(exc.errors)
        except ScenarioError as exc:
            problems.append(exc)
        return None

    with collecting_unknown_fields() as unknown:
        top = _Section(data, "", file, _TOP)
        default_name = Path(source).stem if source and not source.startswith("<") else "scenario"
        name = attempt(lambda: top.str_("name", default_name))
        description = attempt(lambda: top.str_("description", ""))
        target = attempt(lambda: _parse_target(top, file))
        load = attempt(lambda: _parse_load(top, base_dir))
        traffic_top = top
        if load is not None and load.mode == "replay":  # replay needs no classes (see _with_replay_class)
            traffic_top = _Section({"traffic": _with_replay_class(data)["traffic"]}, "", file, _TOP)
        target_extra = target.extra_body if target is not None else {}
        traffic = attempt(lambda: _parse_traffic(traffic_top, file, base_dir, target_extra))
        task_names = {t.name for t in traffic.classes} if traffic is not None else _raw_task_names(data)
        slo = attempt(lambda: _parse_slo(top, file, task_names))
        cost = attempt(lambda: _parse_cost(top))
    # A mapping's own error right after one of its keys was skipped as unknown is a consequence
    # (e.g. "cases: at least one case" after "cases.explode: unknown field"): report the cause.
    skipped_in = {e.field.rpartition(".")[0] for e in unknown}
    problems = [e for e in problems if e.field not in skipped_in]
    problems = sorted(unknown + problems, key=lambda e: _order(data, e.field))
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise ScenarioErrors(problems)
    return Scenario(
        name, description, source if os.path.isfile(source) else None, target, traffic, load, slo, cost
    )


def _parse_cost(top: _Section) -> CostConfig | None:
    if not top.has("cost"):
        return None
    c = top.section("cost", _COST)
    if not c.has("gpu_hour_usd"):
        raise c.err("gpu_hour_usd", "a number > 0")
    return CostConfig(c.num("gpu_hour_usd", None, gt=0), c.num("gpus", 1, ge=1, integer=True))


def _raw_task_names(data: dict[str, Any]) -> set[str]:
    """Class names as written, to check ``slo.per_task`` when ``traffic`` itself is invalid."""
    traffic = data.get("traffic")
    classes = traffic.get("classes") if isinstance(traffic, dict) else None
    return {str(k) for k in classes} if isinstance(classes, dict) else set()


def _order(data: dict[str, Any], field: str) -> int:
    """Problems in the order of the file's top-level sections (then as found)."""
    head = field.split(".", 1)[0].split("[", 1)[0]
    keys = [str(k) for k in data]
    return keys.index(head) if head in keys else len(keys)
