"""The scenario data model: frozen config dataclasses and the allowed values of their fields.

A :class:`Scenario` holds a :class:`TargetConfig` (where and how to send), a
:class:`TrafficConfig` (seed and the :class:`TaskConfig` classes with their
:class:`Sampling` and optional :class:`DatasetConfig`), a :class:`LoadConfig`, a
:class:`SloConfig` and an optional :class:`CostConfig`. ``Scenario.resolved()`` renders it as
the JSON-able configuration written to the run manifest.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

from tokenswarm.metrics import SLO_METRICS
from tokenswarm.workload.distributions import Dist
from tokenswarm.workload.scenario.credentials import mask_headers

KINDS = ("qa", "summarization", "code", "multi_turn", "abnormal", "extraction")
#: a traffic class name (a Spec-Bench category names a class too)
_CLASS_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")
APIS = ("chat", "completions")
TASK_DRAWS = ("per_user", "per_request", "stratified")
#: what ``load.until.precision`` measures: the median of this per-request quantity
UNTIL_METRICS = ("request_output_tps", "ttft_ms", "e2e_ms")
LOAD_MODES = ("closed", "open", "replay", "search", "sweep")
#: what a capacity search varies: the users of a closed loop or the rate of an open loop
SEARCH_OVER = ("concurrency", "rate")
ARRIVALS = ("poisson", "gamma", "constant")
DATASET_FORMATS = ("auto", "jsonl", "sharegpt", "spec_bench")
#: abnormal request kinds an ``abnormal`` task can send (see the README)
ABNORMAL_CASES = ("empty_prompt", "huge_max_tokens", "invalid_params", "cancel_early", "unicode")
SLO_NAMES = tuple(SLO_METRICS)  # the glossary defines them (tokenswarm.metrics)
#: extraction: how the JSON answer is asked for (``none``: only by the instruction)
RESPONSE_FORMATS = ("json_schema", "json_object", "none")
#: shared prefixes: how often each distinct prefix is drawn
PREFIX_POPULARITY = ("uniform", "zipf")
#: ``target.limits`` defaults: a stream may carry at most ``OUTPUT_TOKENS_FACTOR`` x ``max_tokens``
#: tokens (a conforming server sends at most ``max_tokens``) and ``MAX_RESPONSE_BYTES`` of SSE
#: payload; past either it is cut as a protocol error (tokenswarm.wire.limits.StreamLimits).
OUTPUT_TOKENS_FACTOR = 4.0
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
#: request-body fields tokenswarm sets itself; ``extra_body`` may not set them
RESERVED_BODY_FIELDS = ("model", "messages", "prompt", "stream", "stream_options", "max_tokens",
                        "max_completion_tokens")


@dataclass(frozen=True)
class SharedPrefix:
    """A prefix shared across requests: ``count`` distinct texts of ``tokens`` tokens each.

    Each request draws one of them (``uniform``, or ``zipf`` with exponent ``zipf_s``: prefix
    ``i`` has weight ``1 / (i + 1) ** zipf_s``) and puts it first (a system message in chat).
    """

    tokens: int
    count: int
    popularity: str = "uniform"
    zipf_s: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"tokens": self.tokens, "count": self.count, "popularity": self.popularity}
        if self.popularity == "zipf":
            d["zipf_s"] = self.zipf_s
        return d


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
    """A user dataset: absolute ``path`` and ``format`` (``auto``, ``jsonl``, ``sharegpt`` or ``spec_bench``).

    ``category``: the one task category this class reads (a Spec-Bench class is split into one
    class per category when the scenario is parsed, each with its ``category`` set).
    """

    path: str
    format: str = "auto"
    category: str | None = None


@dataclass(frozen=True)
class TaskConfig:
    """One traffic class ("task"): what to send and how often relative to the others."""

    name: str
    kind: str
    weight: float
    prompt_tokens: Dist
    max_tokens: Dist  # the requested lengths (each request's max_tokens); the record's output_tokens is observed
    document_tokens: Dist | None
    turns: Dist | None
    think_time_s: Dist
    sampling: Sampling
    dataset: DatasetConfig | None
    followup_tokens: Dist | None = None  # multi_turn: user messages after turn 0
    completion_share: float = 0.5  # code: share of completion (vs generation) prompts
    abnormal_cases: tuple[tuple[str, float], ...] = ()  # abnormal: (case, weight)
    #: extra request-body fields: target, traffic and class levels merged (class wins)
    extra_body: dict[str, Any] = field(default_factory=dict)
    class_extra_body: dict[str, Any] = field(default_factory=dict)  # this class's own level
    response_format: str = "none"  # extraction: json_schema, json_object or none
    shared_prefix: SharedPrefix | None = None
    #: this class's own model split, (name, weight) pairs; empty: the target's (see ``Scenario.models_of``)
    models: tuple[tuple[str, float], ...] = ()


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
    keep_alive: bool = True  # False: a new connection for every request (measure connection cost)
    extra_body: dict[str, Any] = field(default_factory=dict)  # request-body fields for every request
    #: ``model: {name: weight, ...}``: every request draws its model by weight (LoRA adapters);
    #: empty for one model (``model`` then names it, or is ``auto``). ``model`` is the first name.
    models: tuple[tuple[str, float], ...] = ()
    #: ``limits``: what one response may carry before it is cut as a protocol error
    output_tokens_factor: float = OUTPUT_TOKENS_FACTOR
    max_response_bytes: int = MAX_RESPONSE_BYTES

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
    # "per_user": a closed-loop user sticks to one task; "per_request": one user draws the task
    # of every request by weight, so even concurrency 1 sends the whole mix; "stratified": as
    # per_request, but each sender deals the tasks in their weights' proportions (no luck of the
    # draw: after k requests every task has its share of k, give or take one).
    task_draw: str = "per_user"
    extra_body: dict[str, Any] = field(default_factory=dict)  # traffic level (over the target's)

    def task(self, name: str) -> TaskConfig:
        """The task called ``name`` (KeyError if none)."""
        for t in self.classes:
            if t.name == name:
                return t
        raise KeyError(name)


@dataclass(frozen=True)
class UntilConfig:
    """``load.until``: a step runs until its cells have what they need (adaptive steps).

    The steady window lasts at least ``load.step_duration_s``; then it goes on until every task
    of the step has ``min_requests_per_task`` successful requests and, with ``precision``, the
    count the pilot asked for (see :mod:`tokenswarm.orchestrate.adaptive`), and never beyond
    ``max_step_s`` seconds of steady window.
    """

    max_step_s: float
    min_requests_per_task: int | None = None
    precision: float | None = None  #: relative half-width of the 95 % interval of the median
    metric: str = "request_output_tps"  #: the per-request quantity whose median ``precision`` is about

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as a scenario writes it."""
        out: dict[str, Any] = {"max_step_s": self.max_step_s}
        if self.min_requests_per_task is not None:
            out["min_requests_per_task"] = self.min_requests_per_task
        if self.precision is not None:
            out["precision"] = self.precision
            out["metric"] = self.metric
        return out


@dataclass(frozen=True)
class SearchConfig:
    """``load.search``: the highest load meeting the SLOs (exponential growth, then bisection).

    Probes ``start``, ``start * factor``, ... (at most ``max``) until one fails, then bisects
    between the last passing and the first failing load until they are at most ``resolution``
    apart. A probe's steady window lasts ``step_duration_s`` and is extended (up to
    ``max_step_s``) while a judged percentile has too few samples; then the load is held
    (``drain``, at most ``drain_max_s``) until the window's last requests finished.
    """

    over: str  # "concurrency" | "rate"
    start: float
    factor: float
    max: float
    resolution: float
    max_step_s: float
    drain_max_s: float

    def max_probes(self) -> int:
        """An upper bound on the number of probes: the growth to ``max``, then the bisection."""
        grow = math.ceil(math.log(max(self.max / self.start, 1.0)) / math.log(self.factor)) + 1
        width = max(self.max - self.start, self.resolution)
        return grow + math.ceil(math.log2(max(width / self.resolution, 1.0))) + 2

    def to_dict(self) -> dict[str, Any]:
        return {"over": self.over, "start": self.start, "factor": self.factor, "max": self.max,
                "resolution": self.resolution, "max_step_s": self.max_step_s, "drain_max_s": self.drain_max_s}


@dataclass(frozen=True)
class SweepConfig:
    """``load.sweep``: saturation first (``max_concurrency`` users), then one user, then ``steps``
    concurrencies spread evenly between one and the saturation concurrency (GuideLLM's sweep)."""

    steps: int
    max_concurrency: int
    drain_max_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "max_concurrency": self.max_concurrency, "drain_max_s": self.drain_max_s}


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
    # replay: the trace (absolute path), its format, the speed factor and Mooncake's block size
    trace: str | None = None
    trace_format: str = "auto"
    speed: float = 1.0
    trace_block_tokens: int = 512
    until: UntilConfig | None = None  # adaptive steps (closed and open loop)
    #: mode search / sweep: how the plan finds its steps (``steps`` then holds the first probe)
    search: SearchConfig | None = None
    sweep: SweepConfig | None = None

    @property
    def loop(self) -> str:
        """How requests are sent: ``closed`` (users), ``open`` (a rate) or ``replay`` -- a search
        over rate is an open loop, a search over concurrency and a sweep are closed loops."""
        if self.search is not None:
            return "open" if self.search.over == "rate" else "closed"
        if self.sweep is not None:
            return "closed"
        return self.mode


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

    def models_of(self, task: TaskConfig) -> tuple[tuple[str, float], ...]:
        """The (model, weight) split of ``task``'s requests: its own, else the target's; empty: one model."""
        return task.models or self.target.models

    def model_names(self) -> tuple[str, ...]:
        """Every model name the scenario asks for by name, target's first (``auto`` is not a name)."""
        names = [self.target.model] if self.target.model != "auto" else []
        names += [n for n, _ in self.target.models]
        for task in self.traffic.classes:
            names += [n for n, _ in task.models]
        return tuple(dict.fromkeys(names))

    def resolved(self) -> dict[str, Any]:
        """JSON-able resolved configuration for the manifest; secret-looking header values are ``***``."""
        t = self.target
        return {
            "name": self.name,
            "description": self.description,
            "path": self.path,
            "target": {
                "base_url": t.base_url,
                "api": t.api,
                "model": dict(t.models) if t.models else t.model,
                "api_key_env": t.api_key_env,
                "headers": mask_headers(t.headers),
                "timeouts": {
                    "connect_s": t.connect_timeout_s,
                    "first_token_s": t.first_token_timeout_s,
                    "total_s": t.total_timeout_s,
                },
                "continuous_usage_stats": t.continuous_usage_stats,
                "verify_tls": t.verify_tls,
                "keep_alive": t.keep_alive,
                "metrics_url": "auto" if t.metrics_auto and t.metrics_url is None else t.metrics_url,
                "scrape_interval_s": t.scrape_interval_s,
                "extra_metrics": [{"name": n, "url": u} for n, u in t.extra_metrics],
                "extra_body": dict(t.extra_body),
                "limits": {"output_tokens_factor": t.output_tokens_factor, "response_bytes": t.max_response_bytes},
            },
            "traffic": {
                "seed": self.traffic.seed,
                "keep_outputs": self.traffic.keep_outputs,
                "tokenizer": self.traffic.tokenizer,
                "extra_body": dict(self.traffic.extra_body),
                "classes": {task.name: _task_dict(task) for task in self.traffic.classes},
                "task_draw": self.traffic.task_draw,
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
                **({"until": self.load.until.to_dict()} if self.load.until is not None else {}),
                **({"trace": self.load.trace, "trace_format": self.load.trace_format, "speed": self.load.speed,
                    "trace_block_tokens": self.load.trace_block_tokens} if self.load.mode == "replay" else {}),
                **({"search": self.load.search.to_dict()} if self.load.search is not None else {}),
                **({"sweep": self.load.sweep.to_dict()} if self.load.sweep is not None else {}),
            },
            "slo": {**self.slo.overall, "per_task": {k: dict(v) for k, v in self.slo.per_task.items()}},
            "cost": None
            if self.cost is None
            else {"gpu_hour_usd": self.cost.gpu_hour_usd, "gpus": self.cost.gpus},
        }


def requested_means(task: TaskConfig) -> dict[str, float]:
    """Nominal mean of each requested length of ``task``, by field; no prompt length for a dataset.

    ``prompt_tokens`` is the first turn's prompt (the document, for summarization and
    extraction); a dataset's prompts are sent as the file has them, so they have no requested
    length.
    """
    out: dict[str, float] = {}
    if task.dataset is None:
        out["prompt_tokens"] = float(task.prompt_tokens.mean)
    out["max_tokens"] = float(task.max_tokens.mean)
    return out


def _task_dict(task: TaskConfig) -> dict[str, Any]:
    d: dict[str, Any] = {"kind": task.kind, "weight": task.weight}
    if task.kind not in ("summarization", "extraction"):
        d["prompt_tokens"] = dict(task.prompt_tokens.spec)
    d["max_tokens"] = dict(task.max_tokens.spec)
    for name in ("document_tokens", "turns", "followup_tokens"):
        dist = getattr(task, name)
        if dist is not None:
            d[name] = dict(dist.spec)
    d["think_time_s"] = dict(task.think_time_s.spec)
    # the nominal means of the requested lengths, for the analysis to compare with what the
    # server counted (analysis/sent.py reads them here and needs no distribution code)
    d["requested_mean_tokens"] = requested_means(task)
    d["sampling"] = task.sampling.params()
    if task.dataset is not None:
        d["dataset"] = {"path": task.dataset.path, "format": task.dataset.format}
        if task.dataset.category is not None:
            d["dataset"]["category"] = task.dataset.category
    if task.kind == "code":
        d["completion_share"] = task.completion_share
    if task.kind == "abnormal":
        d["cases"] = dict(task.abnormal_cases)
    if task.kind == "extraction":
        d["response_format"] = task.response_format
    if task.shared_prefix is not None:
        d["shared_prefix"] = task.shared_prefix.to_dict()
    if task.models:
        d["model"] = dict(task.models)
    d["extra_body"] = dict(task.class_extra_body)
    d["extra_body_sent"] = dict(task.extra_body)  # what every request of this class carries
    return d


def metrics_url_for(base_url: str) -> str:
    """``{server root}/metrics`` (vLLM/SGLang serve Prometheus metrics at the root)."""
    return _strip_v1(base_url) + "/metrics"


def _strip_v1(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url
