"""Scenario files: one YAML file describes a run (target, traffic mix, load steps, SLOs, cost).

:func:`load_scenario` reads and validates a file into a frozen :class:`Scenario`. Every
validation error is a :class:`ScenarioError` whose message names the file, the dotted field
path and what was expected, e.g.::

    scenarios/mix.yaml: traffic.classes.qa.weight: expected a number >= 0, got -1

The CLI turns a ``ScenarioError`` into exit status 2 before any traffic is sent. The schema
is documented field by field in the README.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tokenswarm.load.distributions import Dist, DistSpecError, make_dist
from tokenswarm.metrics import SLO_METRICS

KINDS = ("qa", "summarization", "code", "multi_turn", "abnormal")
APIS = ("chat", "completions")
LOAD_MODES = ("closed", "open")
ARRIVALS = ("poisson", "gamma", "constant")
DATASET_FORMATS = ("auto", "jsonl", "sharegpt")
#: abnormal request kinds an ``abnormal`` task can send (see the README)
ABNORMAL_CASES = ("empty_prompt", "huge_max_tokens", "invalid_params", "cancel_early", "unicode")
SLO_NAMES = tuple(SLO_METRICS)  # the glossary defines them (tokenswarm.metrics)
#: field names that would hold a literal secret; the key must come from ``api_key_env``
_SECRET_FIELDS = (
    "api_key",
    "apikey",
    "key",
    "token",
    "openai_api_key",
    "authorization",
    "password",
    "secret",
    "bearer",
    "access_token",
)
_SECRET_HEADER = re.compile(r"auth|key|token|secret|cookie|password", re.IGNORECASE)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY_LIKE = re.compile(r"^(sk|pk|rk|hf|gsk|xai)[-_]|^[A-Za-z0-9_\-]{40,}$")
_CLASS_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_MISSING = object()


class ScenarioError(ValueError):
    """Invalid scenario. ``str(e) == "<file>: <field>: expected <what>, got <value>"``.

    ``problem`` (e.g. ``"unknown field"``) is put before ``expected`` when given. Secrets are
    never echoed: callers pass ``"***"`` as ``got`` for them.
    """

    def __init__(self, file: str, field: str, expected: str, got: Any = _MISSING, problem: str | None = None):
        self.file = str(file)
        self.field = field
        self.expected = expected
        self.got = None if got is _MISSING else got
        self.problem = problem
        shown = "nothing" if got is _MISSING else _show(got)
        head = f"{problem}, " if problem else ""
        super().__init__(f"{self.file}: {field}: {head}expected {expected}, got {shown}")


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 120 else text[:117] + "..."


# --------------------------------------------------------------------------- config types


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters sent with every request of a task; ``None`` means "not sent"."""

    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] | None = None
    ignore_eos: bool | None = None

    def params(self) -> dict[str, Any]:
        """The fields to put in a request body (``None`` omitted; ``stop`` as a list)."""
        out: dict[str, Any] = {}
        for name in ("temperature", "top_p", "seed", "ignore_eos"):
            v = getattr(self, name)
            if v is not None:
                out[name] = v
        if self.stop is not None:
            out["stop"] = list(self.stop)
        return out


@dataclass(frozen=True)
class DatasetConfig:
    """A user dataset: absolute ``path`` and ``format`` (``auto``, ``jsonl`` or ``sharegpt``)."""

    path: str
    format: str = "auto"


@dataclass(frozen=True)
class TaskConfig:
    """One traffic class ("task"): what to send and how often relative to the others."""

    name: str
    kind: str
    weight: float
    prompt_tokens: Dist
    output_tokens: Dist
    document_tokens: Dist | None
    turns: Dist | None
    think_time_s: Dist
    sampling: Sampling
    dataset: DatasetConfig | None
    followup_tokens: Dist | None = None  # multi_turn: user messages after turn 0
    completion_share: float = 0.5  # code: share of completion (vs generation) prompts
    abnormal_cases: tuple[tuple[str, float], ...] = ()  # abnormal: (case, weight)


@dataclass(frozen=True)
class TargetConfig:
    """Where to send requests and how."""

    base_url: str | None
    api: str
    model: str
    api_key_env: str | None
    headers: dict[str, str]
    connect_timeout_s: float
    first_token_timeout_s: float
    total_timeout_s: float
    continuous_usage_stats: bool
    verify_tls: bool
    metrics_url: str | None
    scrape_interval_s: float
    extra_metrics: tuple[tuple[str, str], ...]
    metrics_auto: bool = False  # metrics_url was 'auto': derive it from whatever base_url is used

    def api_key(self) -> str | None:
        """The API key from the environment (read now, never stored); ``None`` if unset/empty."""
        if not self.api_key_env:
            return None
        return os.environ.get(self.api_key_env) or None

    def metrics_endpoint(self, base_url: str | None) -> str | None:
        """The target's Prometheus URL for ``base_url`` (e.g. after ``--host``); ``None`` = off."""
        if self.metrics_auto:
            return metrics_url_for(base_url) if base_url else None
        return self.metrics_url


@dataclass(frozen=True)
class TrafficConfig:
    seed: int
    keep_outputs: bool
    tokenizer: str | None
    classes: tuple[TaskConfig, ...]

    def task(self, name: str) -> TaskConfig:
        """The task called ``name`` (KeyError if none)."""
        for t in self.classes:
            if t.name == name:
                return t
        raise KeyError(name)


@dataclass(frozen=True)
class LoadConfig:
    mode: str
    steps: tuple[float, ...]
    warmup_s: float
    step_duration_s: float
    spawn_rate: float
    arrival: str
    burstiness: float
    max_in_flight: int
    stop_timeout_s: float
    ramp_s: float
    report_interval_s: float | None = None  # live window summaries (soak); None = off


@dataclass(frozen=True)
class SloConfig:
    overall: dict[str, float]
    per_task: dict[str, dict[str, float]]


@dataclass(frozen=True)
class CostConfig:
    gpu_hour_usd: float
    gpus: int


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    path: str | None
    target: TargetConfig
    traffic: TrafficConfig
    load: LoadConfig
    slo: SloConfig
    cost: CostConfig | None

    def resolved(self) -> dict:
        """JSON-able resolved configuration for the manifest; secret-looking header values are ``***``."""
        t = self.target
        return {
            "name": self.name,
            "description": self.description,
            "path": self.path,
            "target": {
                "base_url": t.base_url,
                "api": t.api,
                "model": t.model,
                "api_key_env": t.api_key_env,
                "headers": mask_headers(t.headers),
                "timeouts": {
                    "connect_s": t.connect_timeout_s,
                    "first_token_s": t.first_token_timeout_s,
                    "total_s": t.total_timeout_s,
                },
                "continuous_usage_stats": t.continuous_usage_stats,
                "verify_tls": t.verify_tls,
                "metrics_url": "auto" if t.metrics_auto and t.metrics_url is None else t.metrics_url,
                "scrape_interval_s": t.scrape_interval_s,
                "extra_metrics": [{"name": n, "url": u} for n, u in t.extra_metrics],
            },
            "traffic": {
                "seed": self.traffic.seed,
                "keep_outputs": self.traffic.keep_outputs,
                "tokenizer": self.traffic.tokenizer,
                "classes": {task.name: _task_dict(task) for task in self.traffic.classes},
            },
            "load": {
                "mode": self.load.mode,
                "steps": list(self.load.steps),
                "warmup_s": self.load.warmup_s,
                "step_duration_s": self.load.step_duration_s,
                "spawn_rate": self.load.spawn_rate,
                "arrival": self.load.arrival,
                "burstiness": self.load.burstiness,
                "max_in_flight": self.load.max_in_flight,
                "stop_timeout_s": self.load.stop_timeout_s,
                "ramp_s": self.load.ramp_s,
                "report_interval_s": self.load.report_interval_s,
            },
            "slo": {**self.slo.overall, "per_task": {k: dict(v) for k, v in self.slo.per_task.items()}},
            "cost": None
            if self.cost is None
            else {"gpu_hour_usd": self.cost.gpu_hour_usd, "gpus": self.cost.gpus},
        }


def _task_dict(task: TaskConfig) -> dict:
    d: dict[str, Any] = {"kind": task.kind, "weight": task.weight}
    if task.kind != "summarization":
        d["prompt_tokens"] = dict(task.prompt_tokens.spec)
    d["output_tokens"] = dict(task.output_tokens.spec)
    for name in ("document_tokens", "turns", "followup_tokens"):
        dist = getattr(task, name)
        if dist is not None:
            d[name] = dict(dist.spec)
    d["think_time_s"] = dict(task.think_time_s.spec)
    d["sampling"] = task.sampling.params()
    if task.dataset is not None:
        d["dataset"] = {"path": task.dataset.path, "format": task.dataset.format}
    if task.kind == "code":
        d["completion_share"] = task.completion_share
    if task.kind == "abnormal":
        d["cases"] = dict(task.abnormal_cases)
    return d


def mask_headers(headers: dict[str, str]) -> dict[str, str]:
    """Copy of ``headers`` with Authorization/API-key/token/cookie-like values replaced by ``***``."""
    return {k: ("***" if _SECRET_HEADER.search(k) else v) for k, v in headers.items()}


def metrics_url_for(base_url: str) -> str:
    """``{server root}/metrics`` (vLLM/SGLang serve Prometheus metrics at the root)."""
    return _strip_v1(base_url) + "/metrics"


def _strip_v1(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


# --------------------------------------------------------------------------- field reader


class _Section:
    """Typed access to one mapping of the YAML, with dotted paths for errors and unknown-key checks."""

    def __init__(self, data: Any, path: str, file: str, known: tuple[str, ...]):
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ScenarioError(file, path or "(top level)", "a mapping", data)
        self.data, self.path, self.file, self.known = data, path, file, known
        for key in data:
            if not isinstance(key, str) or key not in known:
                raise ScenarioError(
                    file, self.at(str(key)), "one of " + ", ".join(known), key, problem="unknown field"
                )

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def err(self, key: str, expected: str, got: Any = _MISSING) -> ScenarioError:
        return ScenarioError(
            self.file, self.at(key), expected, self.data.get(key, got) if got is _MISSING else got
        )

    def has(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def raw(self, key: str, default: Any = None) -> Any:
        v = self.data.get(key)
        return default if v is None else v

    def str_(self, key: str, default: Any = _MISSING, choices: tuple[str, ...] | None = None) -> Any:
        if not self.has(key):
            if default is _MISSING:
                raise self.err(key, "a string" if not choices else "one of " + ", ".join(choices))
            return default
        v = self.data[key]
        if choices is not None:
            if v not in choices:
                raise self.err(key, "one of " + ", ".join(choices))
        elif not isinstance(v, str):
            raise self.err(key, "a string")
        return v

    def bool_(self, key: str, default: Any) -> Any:
        if not self.has(key):
            return default
        v = self.data[key]
        if not isinstance(v, bool):
            raise self.err(key, "true or false")
        return v

    def num(
        self,
        key: str,
        default: Any,
        *,
        ge: float | None = None,
        gt: float | None = None,
        le: float | None = None,
        integer: bool = False,
        duration: bool = False,
    ) -> Any:
        if not self.has(key):
            return default
        v = self.data[key]
        if duration and isinstance(v, str):
            m = _DURATION.match(v)
            if not m:
                raise self.err(key, "a number of seconds or a duration like '30s', '10m', '4h'")
            v = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        what = "an integer" if integer else "a number"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.err(key, what)
        if integer and v != int(v):
            raise self.err(key, what)
        for bound, ok, text in (
            (ge, lambda x, b: x >= b, ">="),
            (gt, lambda x, b: x > b, ">"),
            (le, lambda x, b: x <= b, "<="),
        ):
            if bound is not None and not ok(v, bound):
                raise self.err(key, f"{what} {text} {bound:g}")
        return int(v) if integer else float(v)

    def dist(self, key: str, default: Any, *, floor: float | None, integer: bool) -> Dist | None:
        spec = self.data.get(key) if self.has(key) else default
        if spec is None:
            return None
        try:
            return make_dist(spec, self.at(key), floor=floor, integer=integer)
        except DistSpecError as exc:
            raise ScenarioError(self.file, exc.field, exc.expected, exc.got) from None

    def section(self, key: str, known: tuple[str, ...]) -> _Section:
        return _Section(self.data.get(key), self.at(key), self.file, known)


# --------------------------------------------------------------------------- parsing

_TOP = ("name", "description", "target", "traffic", "load", "slo", "cost")
_TARGET = (
    "base_url",
    "api",
    "model",
    "api_key_env",
    "headers",
    "timeouts",
    "continuous_usage_stats",
    "verify_tls",
    "metrics_url",
    "scrape_interval_s",
    "extra_metrics",
)
_TIMEOUTS = ("connect_s", "first_token_s", "total_s")
_TRAFFIC = ("seed", "keep_outputs", "tokenizer", "sampling", "classes")
_SAMPLING = ("temperature", "top_p", "seed", "stop", "ignore_eos")
_TASK_COMMON = ("kind", "weight", "output_tokens", "think_time_s", "sampling", "dataset")
_TASK_FIELDS = {
    "qa": _TASK_COMMON + ("prompt_tokens",),
    "summarization": _TASK_COMMON + ("document_tokens",),
    "code": _TASK_COMMON + ("prompt_tokens", "completion_share"),
    "multi_turn": _TASK_COMMON + ("prompt_tokens", "followup_tokens", "turns"),
    "abnormal": ("kind", "weight", "prompt_tokens", "output_tokens", "think_time_s", "sampling", "cases"),
}
_LOAD = (
    "mode",
    "steps",
    "warmup_s",
    "step_duration_s",
    "spawn_rate",
    "arrival",
    "burstiness",
    "max_in_flight",
    "stop_timeout_s",
    "ramp_s",
    "report_interval_s",
)
_COST = ("gpu_hour_usd", "gpus")

#: per-kind defaults of the length/time distributions (documented in the README)
DEFAULTS: dict[str, dict[str, Any]] = {
    "qa": {
        "prompt_tokens": {"dist": "lognormal", "mean": 60, "sigma": 0.5, "min": 8, "max": 400},
        "output_tokens": {"dist": "uniform", "min": 32, "max": 256},
    },
    "summarization": {
        "document_tokens": {"dist": "uniform", "min": 1000, "max": 8000},
        "output_tokens": {"dist": "uniform", "min": 64, "max": 256},
    },
    "code": {
        "prompt_tokens": {"dist": "uniform", "min": 200, "max": 2000},
        "output_tokens": {"dist": "uniform", "min": 64, "max": 512},
    },
    "multi_turn": {
        "prompt_tokens": {"dist": "lognormal", "mean": 80, "sigma": 0.6, "min": 8, "max": 1000},
        "followup_tokens": {"dist": "lognormal", "mean": 30, "sigma": 0.6, "min": 4, "max": 300},
        "output_tokens": {"dist": "uniform", "min": 32, "max": 256},
        "turns": {"dist": "uniform", "min": 2, "max": 5},
        "think_time_s": {"dist": "uniform", "min": 0.5, "max": 2.0},
    },
    "abnormal": {
        "prompt_tokens": {"dist": "fixed", "value": 32},
        "output_tokens": {"dist": "fixed", "value": 16},
    },
}


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
    from tokenswarm.load.corpora import load_dataset  # here: corpora imports this module

    for task in scenario.traffic.classes:
        if task.dataset is not None:
            load_dataset(task.dataset.path, task.dataset.format)


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
    traffic = _parse_traffic(top, file, base_dir)
    load = _parse_load(top)
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


def _reject_literal_secrets(data: Any, prefix: str, file: str) -> None:
    """A key in the file would end up in git, logs and manifests: only its env var name is allowed."""
    sections = [("", data)]
    if isinstance(data, dict) and isinstance(data.get("target"), dict):
        sections.append(("target.", data["target"]))
    for pre, sec in sections:
        if not isinstance(sec, dict):
            continue
        for key in sec:
            if isinstance(key, str) and key.lower() in _SECRET_FIELDS:
                raise ScenarioError(
                    file,
                    f"{prefix}{pre}{key}",
                    "target.api_key_env: the NAME of an environment variable holding the key",
                    "***",
                    problem="a literal API key is not allowed in a scenario file",
                )


def _parse_target(top: _Section, file: str) -> TargetConfig:
    t = top.section("target", _TARGET)
    base_url = t.str_("base_url", None)
    if base_url is not None:
        if not re.match(r"^https?://[^/\s]+", base_url):
            raise t.err("base_url", "an http:// or https:// URL")
        base_url = _strip_v1(base_url)
    api = t.str_("api", "chat", APIS)
    model = t.str_("model", "auto")
    if not model:
        raise t.err("model", "a model name or 'auto'")
    key_env = t.str_("api_key_env", None)
    if key_env is not None:
        if _KEY_LIKE.search(key_env):
            raise ScenarioError(
                file,
                t.at("api_key_env"),
                "the NAME of an environment variable (e.g. OPENAI_API_KEY)",
                "***",
                problem="this looks like a key itself",
            )
        if not _ENV_NAME.match(key_env):
            raise t.err("api_key_env", "an environment variable name like OPENAI_API_KEY")
    headers_raw = t.raw("headers", {})
    if not isinstance(headers_raw, dict):
        raise t.err("headers", "a mapping of header name to string value")
    headers: dict[str, str] = {}
    for k, v in headers_raw.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ScenarioError(
                file,
                t.at(f"headers.{k}"),
                "a string header value",
                "***" if _SECRET_HEADER.search(str(k)) else v,
            )
        headers[k] = v
    to = t.section("timeouts", _TIMEOUTS)
    connect = to.num("connect_s", 10.0, gt=0)
    first = to.num("first_token_s", 120.0, gt=0)
    total = to.num("total_s", 600.0, gt=0)
    if first > total:
        raise to.err("first_token_s", f"a number <= timeouts.total_s ({total:g})")
    metrics_raw = t.data.get("metrics_url", "auto")
    metrics_auto = metrics_raw == "auto"
    if metrics_raw is None or metrics_raw is False:
        metrics_url = None
    elif metrics_auto:
        metrics_url = metrics_url_for(base_url) if base_url else None
    elif isinstance(metrics_raw, str) and re.match(r"^https?://", metrics_raw):
        metrics_url = metrics_raw
    else:
        raise t.err("metrics_url", "'auto', null or an http(s) URL")
    extra: list[tuple[str, str]] = []
    extra_raw = t.raw("extra_metrics", [])
    if not isinstance(extra_raw, list):
        raise t.err("extra_metrics", "a list of {name, url}")
    for i, item in enumerate(extra_raw):
        e = _Section(item, t.at(f"extra_metrics[{i}]"), file, ("name", "url"))
        ename = e.str_("name")
        if ename == "target" or ename in {n for n, _ in extra}:
            raise e.err("name", "a unique name other than 'target'")
        url = e.str_("url")
        if not re.match(r"^https?://", url):
            raise e.err("url", "an http(s) URL")
        extra.append((ename, url))
    return TargetConfig(
        base_url=base_url,
        api=api,
        model=model,
        api_key_env=key_env,
        headers=headers,
        connect_timeout_s=connect,
        first_token_timeout_s=first,
        total_timeout_s=total,
        continuous_usage_stats=t.bool_("continuous_usage_stats", True),
        verify_tls=t.bool_("verify_tls", True),
        metrics_url=metrics_url,
        scrape_interval_s=t.num("scrape_interval_s", 5.0, gt=0),
        extra_metrics=tuple(extra),
        metrics_auto=metrics_auto,
    )


def _parse_sampling(s: _Section, base: Sampling) -> Sampling:
    if "max_tokens" in s.data:
        raise ScenarioError(
            s.file,
            s.at("max_tokens"),
            "output_tokens on the class (max_tokens is drawn from it)",
            s.data["max_tokens"],
            problem="not a sampling field",
        )
    s = _Section(s.data, s.path, s.file, _SAMPLING)
    stop = base.stop
    if s.has("stop"):
        raw = s.data["stop"]
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
            raise s.err("stop", "a non-empty string or a list of them")
        stop = tuple(raw)
    return Sampling(
        temperature=s.num("temperature", base.temperature, ge=0),
        top_p=s.num("top_p", base.top_p, gt=0, le=1),
        seed=s.num("seed", base.seed, integer=True),
        stop=stop,
        ignore_eos=s.bool_("ignore_eos", base.ignore_eos),
    )


def _resolve_file(raw: str, base_dir: Path) -> str | None:
    p = Path(os.path.expanduser(raw))
    for cand in [p] if p.is_absolute() else [base_dir / p, Path.cwd() / p]:
        if cand.is_file():
            return str(cand.resolve())
    return None


def _parse_traffic(top: _Section, file: str, base_dir: Path) -> TrafficConfig:
    tr = top.section("traffic", _TRAFFIC)
    seed = tr.num("seed", 0, integer=True)
    tokenizer = None
    if tr.has("tokenizer"):
        raw = tr.str_("tokenizer")
        tokenizer = _resolve_file(raw, base_dir)
        if tokenizer is None:
            raise tr.err(
                "tokenizer", f"a tokenizer.json file (relative to {base_dir} or the working directory)"
            )
        try:
            import tokenizers  # noqa: F401  (optional dependency, only needed when named)
        except ImportError:
            raise tr.err(
                "tokenizer",
                "the 'tokenizers' package to be installed for a local tokenizer (pip install tokenizers)",
            ) from None
    base_sampling = _parse_sampling(tr.section("sampling", _SAMPLING + ("max_tokens",)), Sampling())
    classes_raw = tr.data.get("classes")
    if not isinstance(classes_raw, dict) or not classes_raw:
        raise tr.err("classes", "a mapping of task name -> task config (at least one)")
    classes = []
    for cname, cfg in classes_raw.items():
        classes.append(_parse_task(str(cname), cfg, tr.at(f"classes.{cname}"), file, base_dir, base_sampling))
    if sum(c.weight for c in classes) <= 0:
        raise ScenarioError(
            file, tr.at("classes"), "at least one class with weight > 0", {c.name: c.weight for c in classes}
        )
    return TrafficConfig(
        seed=seed, keep_outputs=tr.bool_("keep_outputs", False), tokenizer=tokenizer, classes=tuple(classes)
    )


def _parse_task(
    name: str, cfg: Any, path: str, file: str, base_dir: Path, base_sampling: Sampling
) -> TaskConfig:
    if not _CLASS_NAME.match(name):
        raise ScenarioError(file, path, "a class name of letters, digits, '_' or '-'", name)
    if not isinstance(cfg, dict):
        raise ScenarioError(file, path, "a mapping (kind, weight, prompt_tokens, ...)", cfg)
    kind = cfg.get("kind", name if name in KINDS else None)
    if kind not in KINDS:
        raise ScenarioError(
            file,
            f"{path}.kind",
            "one of " + ", ".join(KINDS) + " (required when the class name is not a kind)",
            kind,
        )
    if kind == "summarization" and "prompt_tokens" in cfg:
        raise ScenarioError(
            file,
            f"{path}.prompt_tokens",
            "document_tokens for summarization",
            cfg["prompt_tokens"],
            problem="not used by summarization",
        )
    s = _Section(cfg, path, file, _TASK_FIELDS[kind])
    d = DEFAULTS[kind]
    weight = s.num("weight", 1.0, ge=0)
    output = s.dist("output_tokens", d["output_tokens"], floor=1, integer=True)
    document = s.dist("document_tokens", d.get("document_tokens"), floor=1, integer=True)
    prompt = (
        document
        if kind == "summarization"
        else s.dist("prompt_tokens", d["prompt_tokens"], floor=0 if kind == "abnormal" else 1, integer=True)
    )
    turns = s.dist("turns", d.get("turns"), floor=1, integer=True)
    followup = s.dist("followup_tokens", d.get("followup_tokens"), floor=1, integer=True)
    think = s.dist("think_time_s", d.get("think_time_s", 0), floor=0, integer=False)
    sampling = _parse_sampling(s.section("sampling", _SAMPLING + ("max_tokens",)), base_sampling)
    dataset = None
    if s.has("dataset"):
        ds = s.section("dataset", ("path", "format"))
        raw_path = ds.str_("path")
        resolved = _resolve_file(raw_path, base_dir)
        if resolved is None:
            raise ds.err(
                "path", f"an existing dataset file (relative to {base_dir} or the working directory)"
            )
        dataset = DatasetConfig(resolved, ds.str_("format", "auto", DATASET_FORMATS))
    completion_share = s.num("completion_share", 0.5, ge=0, le=1)
    cases: tuple[tuple[str, float], ...] = ()
    if kind == "abnormal":
        raw_cases = s.raw("cases", {c: 1 for c in ABNORMAL_CASES})
        if isinstance(raw_cases, list):
            raw_cases = {c: 1 for c in raw_cases} if all(isinstance(c, str) for c in raw_cases) else raw_cases
        cs = _Section(raw_cases, s.at("cases"), file, ABNORMAL_CASES)
        cases = tuple((c, cs.num(c, 0.0, ge=0)) for c in ABNORMAL_CASES if cs.has(c))
        if not cases or sum(w for _, w in cases) <= 0:
            raise s.err("cases", "at least one of " + ", ".join(ABNORMAL_CASES) + " with weight > 0")
    return TaskConfig(
        name=name,
        kind=kind,
        weight=weight,
        prompt_tokens=prompt,
        output_tokens=output,
        document_tokens=document,
        turns=turns,
        think_time_s=think,
        sampling=sampling,
        dataset=dataset,
        followup_tokens=followup,
        completion_share=completion_share,
        abnormal_cases=cases,
    )


def _parse_load(top: _Section) -> LoadConfig:
    ld = top.section("load", _LOAD)
    mode = ld.str_("mode", "closed", LOAD_MODES)
    raw_steps = ld.raw("steps", [1])
    if isinstance(raw_steps, (int, float)) and not isinstance(raw_steps, bool):
        raw_steps = [raw_steps]
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ld.err(
            "steps", "a non-empty list of " + ("user counts" if mode == "closed" else "request rates (req/s)")
        )
    steps = []
    for i, v in enumerate(raw_steps):
        ok_num = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if mode == "closed" and not (ok_num and v >= 1 and v == int(v)):
            raise ScenarioError(
                ld.file, ld.at(f"steps[{i}]"), "a whole number of users >= 1 (mode closed)", v
            )
        if mode == "open" and not (ok_num and v > 0):
            raise ScenarioError(
                ld.file, ld.at(f"steps[{i}]"), "a positive request rate in req/s (mode open)", v
            )
        steps.append(float(v))
    arrival = ld.str_("arrival", "poisson", ARRIVALS)
    burstiness = ld.num("burstiness", 1.0, gt=0)
    if arrival != "gamma" and burstiness != 1.0:
        raise ld.err("burstiness", "1.0 unless arrival is gamma (poisson is gamma with shape 1)")
    return LoadConfig(
        mode=mode,
        steps=tuple(steps),
        warmup_s=ld.num("warmup_s", 10.0, ge=0, duration=True),
        step_duration_s=ld.num("step_duration_s", 30.0, gt=0, duration=True),
        spawn_rate=ld.num("spawn_rate", 100.0, gt=0),
        arrival=arrival,
        burstiness=burstiness,
        max_in_flight=ld.num("max_in_flight", 1024, ge=1, integer=True),
        stop_timeout_s=ld.num("stop_timeout_s", 30.0, ge=0, duration=True),
        ramp_s=ld.num("ramp_s", 0.0, ge=0, duration=True),
        report_interval_s=ld.num("report_interval_s", None, gt=0, duration=True),
    )


def _slo_values(sec: _Section, names: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for key in names:
        if not sec.has(key):
            continue
        if key in ("error_rate", "min_goodput_share"):
            out[key] = sec.num(key, None, ge=0, le=1)
        elif key == "min_output_tps":
            out[key] = sec.num(key, None, gt=0)
        else:
            out[key] = sec.num(key, None, gt=0)
    return out


def _parse_slo(top: _Section, file: str, task_names: set[str]) -> SloConfig:
    sl = top.section("slo", SLO_NAMES + ("per_task",))
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
        per_task[tname] = _slo_values(_Section(vals, sl.at(f"per_task.{tname}"), file, SLO_NAMES), SLO_NAMES)
    return SloConfig(overall=overall, per_task=per_task)


def shipped_scenarios_dir() -> Path:
    """The shipped scenarios: the checkout's ``scenarios/`` folder, or the installed copy.

    ``tokenswarm/scenarios`` is a link to the top-level folder, so wheels carry the files.
    """
    checkout = Path(__file__).resolve().parents[2] / "scenarios"
    if checkout.is_dir():
        return checkout
    return Path(__file__).resolve().parents[1] / "scenarios"


def resolve_scenario_path(name_or_path: str) -> str:
    """A path as given if it exists, else ``scenarios/NAME[.yaml]`` (cwd, then the checkout's folder)."""
    if os.path.isfile(name_or_path):
        return name_or_path
    if "/" not in name_or_path and os.sep not in name_or_path:
        stem = name_or_path if name_or_path.endswith((".yaml", ".yml")) else name_or_path + ".yaml"
        for folder in (Path.cwd() / "scenarios", shipped_scenarios_dir()):
            if (folder / stem).is_file():
                return str(folder / stem)
    return name_or_path
