"""One parser per scenario section: target, traffic (with its task classes), load and SLOs.

Each ``_parse_*`` function reads its section through a
:class:`~tokenswarm.workload.scenario.fields._Section` that knows the section's field names, and
returns the frozen config of :mod:`tokenswarm.workload.scenario.model`. ``DEFAULTS`` holds the
per-kind length/time distributions that the README documents.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import warnings
from pathlib import Path
from typing import Any

from tokenswarm.manifest import V2_RENAMED_CLASS_FIELDS
from tokenswarm.metrics import DEPRECATED_SLO_NAMES, slo_name
from tokenswarm.redact import SECRET_HEADER as _SECRET_HEADER
from tokenswarm.workload.scenario.credentials import _ENV_NAME, _KEY_LIKE
from tokenswarm.workload.scenario.errors import ScenarioError
from tokenswarm.workload.scenario.fields import _Section
from tokenswarm.workload.scenario.model import (
    ABNORMAL_CASES,
    APIS,
    ARRIVALS,
    DATASET_FORMATS,
    KINDS,
    LOAD_MODES,
    MAX_RESPONSE_BYTES,
    OUTPUT_TOKENS_FACTOR,
    PREFIX_POPULARITY,
    RESERVED_BODY_FIELDS,
    RESPONSE_FORMATS,
    SEARCH_OVER,
    SLO_NAMES,
    TASK_DRAWS,
    UNTIL_METRICS,
    DatasetConfig,
    LoadConfig,
    Sampling,
    SearchConfig,
    SharedPrefix,
    SloConfig,
    SweepConfig,
    TargetConfig,
    TaskConfig,
    TrafficConfig,
    UntilConfig,
    _strip_v1,
    metrics_url_for,
)

_CLASS_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")

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
    "keep_alive",
    "extra_body",
    "limits",
)
_TIMEOUTS = ("connect_s", "first_token_s", "total_s")
_LIMITS = ("output_tokens_factor", "response_bytes")
_TRAFFIC = ("seed", "keep_outputs", "tokenizer", "sampling", "classes", "task_draw", "extra_body")
_SAMPLING = ("temperature", "top_p", "seed", "stop", "ignore_eos")
_TASK_COMMON = ("kind", "weight", "max_tokens", "think_time_s", "sampling", "dataset", "extra_body",
                "shared_prefix", "model")
_TASK_FIELDS = {
    "qa": _TASK_COMMON + ("prompt_tokens",),
    "summarization": _TASK_COMMON + ("document_tokens",),
    "code": _TASK_COMMON + ("prompt_tokens", "completion_share"),
    "multi_turn": _TASK_COMMON + ("prompt_tokens", "followup_tokens", "turns"),
    "abnormal": ("kind", "weight", "prompt_tokens", "max_tokens", "think_time_s", "sampling", "cases",
                 "extra_body", "model"),
    "extraction": ("kind", "weight", "max_tokens", "think_time_s", "sampling", "extra_body", "shared_prefix",
                   "document_tokens", "response_format", "model"),
}
_SHARED_PREFIX = ("tokens", "count", "popularity", "zipf_s")
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
    "trace",
    "trace_format",
    "speed",
    "trace_block_tokens",
    "until",
    "search",
    "sweep",
)
_UNTIL = ("min_requests_per_task", "precision", "metric", "max_step_s")
_SEARCH = ("over", "start", "factor", "max", "resolution", "max_step_s", "drain_max_s")
_SWEEP = ("steps", "max_concurrency", "drain_max_s")
#: the longest a probe's load is held for its last requests, by default (the default timeouts.total_s)
DRAIN_MAX_S = 600.0

#: per-kind defaults of the length/time distributions (documented in the README)
DEFAULTS: dict[str, dict[str, Any]] = {
    "qa": {
        "prompt_tokens": {"dist": "lognormal", "mean": 60, "sigma": 0.5, "min": 8, "max": 400},
        "max_tokens": {"dist": "uniform", "min": 32, "max": 256},
    },
    "summarization": {
        "document_tokens": {"dist": "uniform", "min": 1000, "max": 8000},
        "max_tokens": {"dist": "uniform", "min": 64, "max": 256},
    },
    "code": {
        "prompt_tokens": {"dist": "uniform", "min": 200, "max": 2000},
        "max_tokens": {"dist": "uniform", "min": 64, "max": 512},
    },
    "multi_turn": {
        "prompt_tokens": {"dist": "lognormal", "mean": 80, "sigma": 0.6, "min": 8, "max": 1000},
        "followup_tokens": {"dist": "lognormal", "mean": 30, "sigma": 0.6, "min": 4, "max": 300},
        "max_tokens": {"dist": "uniform", "min": 32, "max": 256},
        "turns": {"dist": "uniform", "min": 2, "max": 5},
        "think_time_s": {"dist": "uniform", "min": 0.5, "max": 2.0},
    },
    "abnormal": {
        "prompt_tokens": {"dist": "fixed", "value": 32},
        "max_tokens": {"dist": "fixed", "value": 16},
    },
    "extraction": {
        "document_tokens": {"dist": "uniform", "min": 200, "max": 1500},
        "max_tokens": {"dist": "uniform", "min": 128, "max": 384},
    },
}


def _parse_extra_body(sec: _Section, key: str = "extra_body") -> dict[str, Any]:
    """``extra_body``: a JSON object of request-body fields passed through as given.

    Fields tokenswarm sets itself (model, messages, max_tokens...) and the sampling fields
    (one name per meaning: ``sampling.temperature``, not ``extra_body.temperature``) are refused.
    """
    import orjson

    raw = sec.raw(key, {})
    if not isinstance(raw, dict):
        raise sec.err(key, "a mapping of request-body field -> JSON value (e.g. {top_k: 20})")
    for name, value in raw.items():
        at = sec.at(f"{key}.{name}")
        if not isinstance(name, str) or not name:
            raise ScenarioError(sec.file, at, "a field name (a non-empty string)", name)
        if name in RESERVED_BODY_FIELDS:
            raise ScenarioError(sec.file, at, "a field tokenswarm does not set itself", name,
                                problem="set by tokenswarm (max_tokens is drawn from the class's max_tokens)")
        if name in _SAMPLING:
            raise ScenarioError(sec.file, at, f"sampling.{name} (one place per field)", name,
                                problem="a sampling field")
        try:
            orjson.dumps(value)
        except TypeError:
            raise ScenarioError(sec.file, at, "a JSON value (string, number, boolean, null, list, mapping)",
                                value) from None
    return dict(raw)


def _parse_shared_prefix(s: _Section) -> SharedPrefix | None:
    if not s.has("shared_prefix"):
        return None
    sp = s.section("shared_prefix", _SHARED_PREFIX)
    if not sp.has("tokens"):
        raise sp.err("tokens", "a prefix length in tokens (an integer >= 1)")
    popularity = sp.str_("popularity", "uniform", PREFIX_POPULARITY)
    zipf_s = sp.num("zipf_s", 1.0, gt=0)
    if popularity != "zipf" and sp.has("zipf_s"):
        raise sp.err("zipf_s", "no zipf_s unless popularity is zipf")
    return SharedPrefix(tokens=sp.num("tokens", None, ge=1, integer=True),
                        count=sp.num("count", 1, ge=1, integer=True), popularity=popularity, zipf_s=zipf_s)


def _parse_api_key_env(t: _Section) -> str | None:
    """``target.api_key_env``: the NAME of the variable holding the key, never the key itself."""
    key_env = t.str_("api_key_env", None)
    if key_env is not None:
        if _KEY_LIKE.search(key_env):
            raise ScenarioError(
                t.file,
                t.at("api_key_env"),
                "the NAME of an environment variable (e.g. OPENAI_API_KEY)",
                "***",
                problem="this looks like a key itself",
            )
        if not _ENV_NAME.match(key_env):
            raise t.err("api_key_env", "an environment variable name like OPENAI_API_KEY")
    return None if key_env is None else str(key_env)


def _parse_headers(t: _Section) -> dict[str, str]:
    """``target.headers``: string values; a secret-looking header's value is masked in errors."""
    headers_raw = t.raw("headers", {})
    if not isinstance(headers_raw, dict):
        raise t.err("headers", "a mapping of header name to string value")
    headers: dict[str, str] = {}
    for k, v in headers_raw.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ScenarioError(
                t.file,
                t.at(f"headers.{k}"),
                "a string header value",
                "***" if _SECRET_HEADER.search(str(k)) else v,
            )
        headers[k] = v
    return headers


def _parse_metrics_url(t: _Section, base_url: str | None) -> str | None:
    """``target.metrics_url``: ``auto`` (the server root's /metrics), null (none) or a URL."""
    metrics_raw = t.data.get("metrics_url", "auto")
    if metrics_raw is None or metrics_raw is False:
        return None
    if metrics_raw == "auto":
        return metrics_url_for(base_url) if base_url else None
    if isinstance(metrics_raw, str) and re.match(r"^https?://", metrics_raw):
        return metrics_raw
    raise t.err("metrics_url", "'auto', null or an http(s) URL")


def _parse_extra_metrics(t: _Section) -> list[tuple[str, str]]:
    """``target.extra_metrics``: uniquely named extra /metrics endpoints (GPU exporters ...)."""
    extra: list[tuple[str, str]] = []
    extra_raw = t.raw("extra_metrics", [])
    if not isinstance(extra_raw, list):
        raise t.err("extra_metrics", "a list of {name, url}")
    for i, item in enumerate(extra_raw):
        e = _Section(item, t.at(f"extra_metrics[{i}]"), t.file, ("name", "url"))
        ename = e.str_("name")
        if ename == "target" or ename in {n for n, _ in extra}:
            raise e.err("name", "a unique name other than 'target'")
        url = e.str_("url")
        if not re.match(r"^https?://", url):
            raise e.err("url", "an http(s) URL")
        extra.append((ename, url))
    return extra


def _parse_target(top: _Section, file: str) -> TargetConfig:
    t = top.section("target", _TARGET)
    base_url = t.str_("base_url", None)
    if base_url is not None:
        if not re.match(r"^https?://[^/\s]+", base_url):
            raise t.err("base_url", "an http:// or https:// URL")
        base_url = _strip_v1(base_url)
    api = t.str_("api", "chat", APIS)
    models = _parse_models(t)
    model = models[0][0] if models else t.str_("model", "auto")
    if not model:
        raise t.err("model", "a model name, 'auto' or a mapping of model name to weight")
    key_env = _parse_api_key_env(t)
    headers = _parse_headers(t)
    to = t.section("timeouts", _TIMEOUTS)
    connect = to.num("connect_s", 10.0, gt=0)
    first = to.num("first_token_s", 120.0, gt=0)
    total = to.num("total_s", 600.0, gt=0)
    if first > total:
        raise to.err("first_token_s", f"a number <= timeouts.total_s ({total:g})")
    lim = t.section("limits", _LIMITS)
    tokens_factor = lim.num("output_tokens_factor", OUTPUT_TOKENS_FACTOR, ge=1)
    response_bytes = lim.num("response_bytes", MAX_RESPONSE_BYTES, ge=1024, integer=True)
    metrics_auto = t.data.get("metrics_url", "auto") == "auto"
    metrics_url = _parse_metrics_url(t, base_url)
    extra = _parse_extra_metrics(t)
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
        keep_alive=t.bool_("keep_alive", True),
        extra_body=_parse_extra_body(t),
        models=models,
        output_tokens_factor=float(tokens_factor),
        max_response_bytes=int(response_bytes),
    )


def _parse_models(sec: _Section, one_name: bool = False) -> tuple[tuple[str, float], ...]:
    """``model`` as a mapping ``{name: weight}`` (a split over models/adapters); ``()`` when it is not one.

    A class's ``model`` may also be one name (all its requests ask for it): ``((name, 1.0),)``.
    """
    raw = sec.raw("model", None)
    if isinstance(raw, str) and one_name:
        if not raw or raw == "auto":
            raise sec.err("model", "a model name (auto is for target.model) or a mapping of model name to weight")
        return ((raw, 1.0),)
    if not isinstance(raw, dict):
        if one_name:
            raise sec.err("model", "a model name or a mapping of model name to weight", raw)
        return ()
    out = []
    for name in raw:
        if not isinstance(name, str) or not name or name == "auto":
            raise sec.err("model", "model names (not auto) mapped to weights >= 0", name)
        w = raw[name]
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ScenarioError(sec.file, sec.at(f"model.{name}"), "a weight >= 0", w)
        out.append((name, float(w)))
    if not out or sum(w for _, w in out) <= 0:
        raise sec.err("model", "at least one model with weight > 0", raw)
    return tuple(out)


def _parse_sampling(s: _Section, base: Sampling) -> Sampling:
    if "max_tokens" in s.data:
        raise ScenarioError(
            s.file,
            s.at("max_tokens"),
            "max_tokens on the class (a distribution: each request's max_tokens is drawn from it)",
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


def _parse_traffic(top: _Section, file: str, base_dir: Path,
                   target_extra: dict[str, Any] | None = None) -> TrafficConfig:
    tr = top.section("traffic", _TRAFFIC)
    traffic_extra = _parse_extra_body(tr)
    inherited = {**(target_extra or {}), **traffic_extra}
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
    classes: list[TaskConfig] = []
    for cname, cfg in classes_raw.items():
        for task in _parse_task(str(cname), cfg, tr.at(f"classes.{cname}"), file, base_dir, base_sampling,
                                inherited):
            if any(c.name == task.name for c in classes):
                raise tr.err(f"classes.{cname}", "class names unique after Spec-Bench classes are split into "
                             f"their categories ({task.name!r} twice)")
            classes.append(task)
    if sum(c.weight for c in classes) <= 0:
        raise ScenarioError(
            file, tr.at("classes"), "at least one class with weight > 0", {c.name: c.weight for c in classes}
        )
    return TrafficConfig(
        seed=seed, keep_outputs=tr.bool_("keep_outputs", False), tokenizer=tokenizer, classes=tuple(classes),
        task_draw=tr.str_("task_draw", "per_user", TASK_DRAWS),
        extra_body=traffic_extra,
    )


#: Class fields that were renamed: old name -> new name (format version 3: the requested
#: lengths, sent as max_tokens, shared a name with the record's output_tokens, the length the
#: server counted). An old name still works, with a FutureWarning naming the file, the field
#: and the new name.
RENAMED_TASK_FIELDS: dict[str, str] = V2_RENAMED_CLASS_FIELDS


def _renamed_task_fields(cfg: dict[str, Any], path: str, file: str) -> dict[str, Any]:
    """``cfg`` with renamed fields under their new names (a copy); warns once per old name."""
    out = dict(cfg)
    for old, new in RENAMED_TASK_FIELDS.items():
        if old not in out:
            continue
        if new in out:
            raise ScenarioError(file, f"{path}.{old}", f"{new} only ({old} is its old name)", out[old],
                                problem=f"both {old} and {new} set")
        # FutureWarning, not DeprecationWarning: it is meant for whoever wrote the scenario
        warnings.warn(f"{file}: {path}.{old}: the field {old!r} is deprecated, write {new!r} (the requested "
                      "lengths, sent as max_tokens; a record's output_tokens is what the server counted)",
                      FutureWarning, stacklevel=2)
        out[new] = out.pop(old)
    return out


def _task_kind(name: str, cfg: dict[str, Any], path: str, file: str, spec_bench: bool) -> str:
    """A class's kind: given, else its name when that is a kind (Spec-Bench: multi_turn)."""
    # Spec-Bench questions are conversations (MT-Bench's have two turns): multi_turn unless told
    kind = cfg.get("kind", name if name in KINDS else ("multi_turn" if spec_bench else None))
    if kind not in KINDS:
        raise ScenarioError(
            file,
            f"{path}.kind",
            "one of " + ", ".join(KINDS) + " (required when the class name is not a kind)",
            kind,
        )
    if kind in ("summarization", "extraction") and "prompt_tokens" in cfg:
        raise ScenarioError(
            file,
            f"{path}.prompt_tokens",
            f"document_tokens for {kind}",
            cfg["prompt_tokens"],
            problem="not used by summarization",
        )
    return str(kind)


def _parse_dataset(
    s: _Section, kind: str, base_dir: Path, spec_bench: bool
) -> tuple[DatasetConfig, tuple[str, ...] | None]:
    """A class's ``dataset``, and for a Spec-Bench file the categories to split it into."""
    ds = s.section("dataset", ("path", "format", "category", "categories"))
    resolved = _resolve_file(ds.str_("path"), base_dir)
    if resolved is None:
        raise ds.err("path", f"an existing dataset file (relative to {base_dir} or the working directory)")
    fmt = ds.str_("format", "auto", DATASET_FORMATS)
    categories: tuple[str, ...] | None = None
    if spec_bench:
        fmt = "spec_bench"
        if kind != "multi_turn":
            raise s.err("kind", "multi_turn for a Spec-Bench dataset (its questions can have several turns, "
                        "sent as one conversation)", kind)
        if s.has("turns"):
            raise s.err("turns", "no turns for a Spec-Bench dataset (every turn of a question is sent)")
        categories = _categories(ds)
    elif ds.has("category") or ds.has("categories"):
        raise ds.err("category" if ds.has("category") else "categories",
                     "no category: only a spec_bench dataset has categories")
    return DatasetConfig(resolved, fmt, ds.str_("category") if ds.has("category") else None), categories


def _parse_cases(s: _Section) -> tuple[tuple[str, float], ...]:
    """An abnormal class's ``cases``: a list of names or a mapping of name -> weight."""
    raw_cases = s.raw("cases", {c: 1 for c in ABNORMAL_CASES})
    if isinstance(raw_cases, list):
        raw_cases = {c: 1 for c in raw_cases} if all(isinstance(c, str) for c in raw_cases) else raw_cases
    cs = _Section(raw_cases, s.at("cases"), s.file, ABNORMAL_CASES)
    cases = tuple((c, cs.num(c, 0.0, ge=0)) for c in ABNORMAL_CASES if cs.has(c))
    if not cases or sum(w for _, w in cases) <= 0:
        raise s.err("cases", "at least one of " + ", ".join(ABNORMAL_CASES) + " with weight > 0")
    return cases


def _parse_task(
    name: str, cfg: Any, path: str, file: str, base_dir: Path, base_sampling: Sampling,
    inherited_extra: dict[str, Any] | None = None,
) -> list[TaskConfig]:
    """One class, or for a Spec-Bench dataset one class per task category (see :func:`_spec_bench_split`)."""
    if not _CLASS_NAME.match(name):
        raise ScenarioError(file, path, "a class name of letters, digits, '_' or '-'", name)
    if not isinstance(cfg, dict):
        raise ScenarioError(file, path, "a mapping (kind, weight, prompt_tokens, ...)", cfg)
    spec_bench = _spec_bench_source(cfg, path, file, base_dir)
    kind = _task_kind(name, cfg, path, file, spec_bench)
    cfg = _renamed_task_fields(cfg, path, file)
    s = _Section(cfg, path, file, _TASK_FIELDS[kind])
    d = DEFAULTS[kind]
    weight = s.num("weight", 1.0, ge=0)
    max_tokens = s.required_dist("max_tokens", d["max_tokens"], floor=1, integer=True)
    document = s.dist("document_tokens", d.get("document_tokens"), floor=1, integer=True)
    prompt = (
        s.required_dist("document_tokens", d.get("document_tokens"), floor=1, integer=True)
        if kind in ("summarization", "extraction")
        else s.required_dist("prompt_tokens", d["prompt_tokens"], floor=0 if kind == "abnormal" else 1, integer=True)
    )
    turns = s.dist("turns", d.get("turns"), floor=1, integer=True)
    followup = s.dist("followup_tokens", d.get("followup_tokens"), floor=1, integer=True)
    think = s.required_dist("think_time_s", d.get("think_time_s", 0), floor=0, integer=False)
    sampling = _parse_sampling(s.section("sampling", _SAMPLING + ("max_tokens",)), base_sampling)
    dataset, categories = _parse_dataset(s, kind, base_dir, spec_bench) if s.has("dataset") else (None, None)
    if spec_bench:
        turns = None  # every turn of a question is sent
        if not s.has("think_time_s"):
            think = s.required_dist("think_time_s", 0, floor=0, integer=False)  # Spec-Bench: turns back to back
    completion_share = s.num("completion_share", 0.5, ge=0, le=1)
    class_extra = _parse_extra_body(s)
    if kind == "extraction" and s.str_("response_format", "json_schema", RESPONSE_FORMATS) != "none":
        for level in (class_extra, inherited_extra or {}):
            if "response_format" in level:
                raise s.err("response_format", "response_format: none when extra_body sets response_format",
                            s.raw("response_format", "json_schema"))
    cases = _parse_cases(s) if kind == "abnormal" else ()
    task = TaskConfig(
        name=name,
        kind=kind,
        weight=weight,
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        document_tokens=document,
        turns=turns,
        think_time_s=think,
        sampling=sampling,
        dataset=dataset,
        followup_tokens=followup,
        completion_share=completion_share,
        abnormal_cases=cases,
        extra_body={**(inherited_extra or {}), **class_extra},
        class_extra_body=class_extra,
        response_format=s.str_("response_format", "json_schema", RESPONSE_FORMATS) if kind == "extraction" else "none",
        shared_prefix=_parse_shared_prefix(s),
        models=_parse_models(s, one_name=True) if s.has("model") else (),
    )
    if dataset is None or dataset.format != "spec_bench" or dataset.category is not None:
        return [task]
    return _spec_bench_split(task, categories, s)


def _spec_bench_source(cfg: dict[str, Any], path: str, file: str, base_dir: Path) -> bool:
    """Whether the class reads a Spec-Bench question file (``format: spec_bench``, or detected by ``auto``)."""
    from tokenswarm.workload.corpora.datasets import file_format  # here: corpora imports this package

    ds = cfg.get("dataset")
    if not isinstance(ds, dict) or not isinstance(ds.get("path"), str):
        return False
    fmt = ds.get("format", "auto")
    if fmt != "auto":
        return bool(fmt == "spec_bench")
    resolved = _resolve_file(ds["path"], base_dir)
    if resolved is None:
        return False  # the dataset section reports the missing file
    return file_format(resolved) == "spec_bench"


def _categories(ds: _Section) -> tuple[str, ...] | None:
    """``dataset.categories``: the Spec-Bench task categories to send (None: all of the file's)."""
    if not ds.has("categories"):
        return None
    raw = ds.raw("categories", None)
    if not isinstance(raw, list) or not raw or not all(isinstance(c, str) and _CLASS_NAME.match(c) for c in raw):
        raise ds.err("categories", "a non-empty list of category names (e.g. [translation, rag])")
    if ds.has("category"):
        raise ds.err("categories", "category or categories, not both")
    return tuple(dict.fromkeys(raw))


def _spec_bench_split(task: TaskConfig, categories: tuple[str, ...] | None, s: _Section) -> list[TaskConfig]:
    """One class per Spec-Bench task category, named by it, so every table splits by category.

    The class's weight is shared out in proportion to the questions of each category, so the mix
    is the file's (a uniform draw over its questions); ``categories`` keeps only those named.
    """
    from tokenswarm.workload.corpora.datasets import DatasetError, category_counts, load_dataset

    assert task.dataset is not None
    try:
        counts = category_counts(load_dataset(task.dataset.path, "spec_bench"))
    except DatasetError as exc:
        raise s.err("dataset", "a valid Spec-Bench question file", str(exc)) from None
    if categories is not None:
        missing = [c for c in categories if c not in counts]
        if missing:
            raise s.err("dataset", f"categories the file has ({', '.join(counts)})", missing)
        counts = {c: counts[c] for c in categories}
    total = sum(counts.values())
    return [dataclasses.replace(task, name=cat, weight=task.weight * n / total,
                                dataset=dataclasses.replace(task.dataset, category=cat))
            for cat, n in counts.items()]


def _parse_replay(ld: _Section, base_dir: Path) -> LoadConfig:
    """``mode: replay``: the trace is read now, so a bad line stops the run before any request."""
    from tokenswarm.workload.trace import TRACE_FORMATS, TraceError, load_trace

    for key in ("steps", "arrival", "burstiness", "ramp_s", "warmup_s"):
        if ld.has(key):
            raise ld.err(key, f"no {key} in mode replay (the trace sets the schedule)")
    if not ld.has("trace"):
        raise ld.err("trace", "the path of a trace file (Mooncake JSONL, BurstGPT CSV or tokenswarm records)")
    path = _resolve_file(ld.str_("trace"), base_dir)
    if path is None:
        raise ld.err("trace", f"an existing trace file (relative to {base_dir} or the working directory)")
    fmt = ld.str_("trace_format", "auto", TRACE_FORMATS)
    speed = ld.num("speed", 1.0, gt=0)
    try:
        trace = load_trace(path, fmt)
    except TraceError as exc:
        raise ScenarioError(ld.file, ld.at("trace"), "a valid trace", str(exc)) from None
    duration = trace.span_s / speed + 1.0  # the steady window ends 1 s after the last scheduled request
    rate = len(trace.entries) / duration
    return LoadConfig(
        mode="replay",
        steps=(rate,),
        warmup_s=0.0,  # the schedule starts with the steady window (trim a trace to drop its start)
        step_duration_s=duration,
        spawn_rate=ld.num("spawn_rate", 100.0, gt=0),
        arrival="constant",
        burstiness=1.0,
        max_in_flight=ld.num("max_in_flight", 1024, ge=1, integer=True),
        stop_timeout_s=ld.num("stop_timeout_s", 30.0, ge=0, duration=True),
        ramp_s=0.0,
        report_interval_s=ld.num("report_interval_s", None, gt=0, duration=True),
        trace=path,
        trace_format=trace.format,
        speed=speed,
        trace_block_tokens=ld.num("trace_block_tokens", 512, ge=1, integer=True),
    )


def _parse_load(top: _Section, base_dir: Path | None = None) -> LoadConfig:
    ld = top.section("load", _LOAD)
    mode = ld.str_("mode", "closed", LOAD_MODES)
    if mode == "replay":
        return _parse_replay(ld, base_dir or Path.cwd())
    for key in ("trace", "trace_format", "speed", "trace_block_tokens"):
        if ld.has(key):
            raise ld.err(key, f"no {key} unless mode is replay")
    for key in ("search", "sweep"):
        if ld.has(key) and mode != key:
            raise ld.err(key, f"no {key} unless mode is {key}")
    if mode in ("search", "sweep"):
        return _parse_probing(ld, mode)
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
        until=_parse_until(ld),
    )


def _parse_until(ld: _Section) -> UntilConfig | None:
    """``load.until``: at least one goal, and always a cap (a step must end)."""
    if not ld.has("until"):
        return None
    un = ld.section("until", _UNTIL)
    if not (un.has("min_requests_per_task") or un.has("precision")):
        raise ld.err("until", "a mapping with min_requests_per_task and/or precision, and max_step_s")
    if not un.has("max_step_s"):
        raise un.err("max_step_s", "a cap on the steady window in seconds (an adaptive step must end)", None)
    step_s = ld.num("step_duration_s", 30.0, gt=0, duration=True)
    max_step_s = un.num("max_step_s", None, gt=0, duration=True)
    if max_step_s < step_s:
        raise un.err("max_step_s", f"a cap >= load.step_duration_s ({step_s:g} s), the shortest steady window")
    return UntilConfig(
        max_step_s=max_step_s,
        min_requests_per_task=un.num("min_requests_per_task", None, ge=1, integer=True),
        precision=un.num("precision", None, gt=0, le=1),
        metric=un.str_("metric", "request_output_tps", UNTIL_METRICS),
    )


def _parse_probing(ld: _Section, mode: str) -> LoadConfig:
    """``mode: search`` / ``mode: sweep``: the plan finds its steps (``steps`` holds the first probe)."""
    if ld.raw("steps") is not None:  # (``--set load.steps=null`` removes a file's steps)
        raise ld.err("steps", f"no steps in mode {mode} (the {mode} chooses them; see load.{mode})")
    if ld.has("until"):  # a probe already extends itself until its SLO checks have their samples
        raise ld.err("until", f"no until in mode {mode}: each probe's window is extended for the sample-size rule "
                              "by itself (on the command line: --set load.until=null)")
    search = sweep = None
    step_s = ld.num("step_duration_s", 30.0, gt=0, duration=True)
    if mode == "search":
        se = ld.section("search", _SEARCH)
        over = se.str_("over", "concurrency", SEARCH_OVER)
        users = over == "concurrency"
        if not users:
            for key in ("start", "max"):
                if not se.has(key):
                    raise se.err(key, "a request rate in req/s (required when searching over rate)")
        start = se.num("start", 1, ge=1, integer=True) if users else se.num("start", None, gt=0)
        top = se.num("max", 256, ge=1, integer=True) if users else se.num("max", None, gt=0)
        if top < start:
            raise se.err("max", f"a load >= start ({start:g})")
        resolution = se.num("resolution", 1 if users else start / 4, ge=1 if users else None, gt=None if users else 0,
                            integer=users)
        search = SearchConfig(over=over, start=float(start), factor=se.num("factor", 2.0, gt=1), max=float(top),
                              resolution=float(resolution),
                              max_step_s=se.num("max_step_s", 5 * step_s, gt=0, duration=True),
                              drain_max_s=se.num("drain_max_s", DRAIN_MAX_S, gt=0, duration=True))
        if search.max_step_s < step_s:
            raise se.err("max_step_s", f"a duration >= load.step_duration_s ({step_s:g} s)")
        first = search.start
    else:
        sw = ld.section("sweep", _SWEEP)
        sweep = SweepConfig(steps=sw.num("steps", 6, ge=1, integer=True),
                            max_concurrency=sw.num("max_concurrency", 64, ge=2, integer=True),
                            drain_max_s=sw.num("drain_max_s", DRAIN_MAX_S, gt=0, duration=True))
        first = float(sweep.max_concurrency)  # saturation first
    arrival = ld.str_("arrival", "poisson", ARRIVALS)
    burstiness = ld.num("burstiness", 1.0, gt=0)
    if arrival != "gamma" and burstiness != 1.0:
        raise ld.err("burstiness", "1.0 unless arrival is gamma (poisson is gamma with shape 1)")
    return LoadConfig(
        mode=mode, steps=(first,), warmup_s=ld.num("warmup_s", 10.0, ge=0, duration=True), step_duration_s=step_s,
        spawn_rate=ld.num("spawn_rate", 100.0, gt=0), arrival=arrival, burstiness=burstiness,
        max_in_flight=ld.num("max_in_flight", 1024, ge=1, integer=True),
        stop_timeout_s=ld.num("stop_timeout_s", 30.0, ge=0, duration=True),
        ramp_s=ld.num("ramp_s", 0.0, ge=0, duration=True),
        report_interval_s=ld.num("report_interval_s", None, gt=0, duration=True), search=search, sweep=sweep)


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
