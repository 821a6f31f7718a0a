"""The ``target`` section: where and how the requests are sent.

The server's URL and API, the model (a name, ``auto``, or a split over models), the NAME of the
API key's environment variable (never the key), headers, timeouts, response limits and the
/metrics endpoints scraped during the run. :func:`_parse_target` returns a :class:`TargetConfig`.
"""

from __future__ import annotations

import re

from tokenswarm.redact import SECRET_HEADER as _SECRET_HEADER
from tokenswarm.workload.errors import ScenarioError
from tokenswarm.workload.scenario.body import _parse_extra_body, _parse_models
from tokenswarm.workload.scenario.credentials import _ENV_NAME, _KEY_LIKE
from tokenswarm.workload.scenario.fields import _Section
from tokenswarm.workload.scenario.model import (
    APIS,
    MAX_RESPONSE_BYTES,
    OUTPUT_TOKENS_FACTOR,
    TargetConfig,
    _strip_v1,
    metrics_url_for,
)

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
