"""Preflight: before any load, the target must answer, accept our credentials and serve the model.

One ``GET /v1/models`` (with the target's auth, see :mod:`tokenswarm.wire.auth`) decides:

* no answer (connection refused, DNS, timeout) -> wait and retry while ``--wait-for-server``
  seconds remain, then fail: a CI stage may start the server a moment before the run;
* HTTP 401/403 -> fail at once with a message that says "authentication" and what the
  server said (a wrong key never becomes a run of 401s);
* a model name the server does not list (the target's, or any of a split over models or LoRA
  adapters) -> fail, naming the models it has;
* ``target.model: auto`` -> the first listed model.

A failure is a :class:`PreflightError`; the caller prints it and exits with status 3. Only
the model ids (and their ``max_model_len``) of the answer are kept for the manifest, not the
whole body. Time and the HTTP call are injected so the logic is tested without a server.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

from tokenswarm.redact import redact
from tokenswarm.wire.auth import split_userinfo, target_headers

#: seconds between two probes while waiting for the server
RETRY_INTERVAL_S = 1.0


class PreflightError(Exception):
    """The target cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class Answer:
    """What one probe of ``/v1/models`` got: a body, an HTTP error, or no answer at all."""

    status: int | None  #: None = no HTTP answer (connection error)
    body: Any = None
    text: str = ""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Preflight:
    model: str
    models: dict[str, Any]  #: ``{"ids": [...], "max_model_len": {...}}`` or ``{"status": ...}``
    server_headers: dict[str, str]
    waited_s: float


def models_url(base_url: str) -> str:
    from tokenswarm.load.context import api_prefix

    base_url = split_userinfo(base_url)[0]
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, api_prefix(base_url) + "/models", "", ""))


def http_get(url: str, headers: dict[str, str], timeout_s: float, verify_tls: bool) -> Answer:
    """One GET; HTTP errors are answers, connection errors are ``status=None``."""
    context = ssl._create_unverified_context() if url.startswith("https") and not verify_tls else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout_s,
                                    context=context) as resp:
            raw = resp.read()
            hdrs = {k.lower(): v for k, v in resp.headers.items() if k.lower() in ("server", "x-version")}
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = None
            return Answer(resp.status, body, raw[:300].decode("utf-8", "replace"), hdrs)
    except urllib.error.HTTPError as exc:
        raw = exc.read() if exc.fp is not None else b""
        return Answer(exc.code, None, _server_message(exc.code, raw))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Answer(None, None, f"{type(exc).__name__}: {reason}")


def _server_message(status: int, raw: bytes) -> str:
    from tokenswarm.wire.reported import error_from_body

    return error_from_body(status, raw)


def preflight(base_url: str, target: Any, wait_s: float = 0.0, *, models: Sequence[str] = (),
              get: Callable[[str, dict[str, str], float, bool], Answer] = http_get,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> Preflight:
    """Probe the target until it answers (at most ``wait_s`` seconds); raise :class:`PreflightError`.

    ``models``: every other model name the scenario asks for (a split over models or LoRA
    adapters, :meth:`~tokenswarm.workload.scenario.Scenario.model_names`); each must be listed too.
    """
    url = models_url(base_url)
    shown = redact(split_userinfo(base_url)[0])
    headers = target_headers(target, base_url)
    start = clock()
    while True:
        answer = get(url, headers, target.connect_timeout_s, target.verify_tls)
        waited = clock() - start
        if answer.status is not None and answer.status < 500:
            break
        if waited + RETRY_INTERVAL_S > wait_s:
            what = answer.text if answer.status is None else f"HTTP {answer.status}: {answer.text}"
            after = f" (waited {waited:.0f} s, --wait-for-server {wait_s:g})" if wait_s else ""
            hint = "" if wait_s else "; to wait for a server that is starting, add --wait-for-server SECONDS"
            raise PreflightError(redact(f"target {shown} does not answer GET /v1/models ({what}){after}; "
                                        f"is the server running and the URL right?{hint}"))
        sleep(RETRY_INTERVAL_S)
    found = _decide(answer, target, shown, waited)
    listed = found.models.get("ids") if isinstance(found.models, dict) else None
    missing = [m for m in models if m != found.model and listed and m not in listed]
    if missing:
        raise PreflightError(redact(f"model(s) {', '.join(map(repr, missing))} not served by {shown}; the server has: "
                                    f"{', '.join(listed or ())} (check the scenario's model split and the "
                                    "server's adapters, e.g. vLLM --lora-modules)"))
    return found


def _decide(answer: Answer, target: Any, shown: str, waited: float) -> Preflight:
    if answer.status in (401, 403):
        how = (f"the key from ${target.api_key_env}" if target.api_key_env and target.api_key()
               else f"${target.api_key_env} is not set" if target.api_key_env
               else "no key configured (set target.api_key_env)")
        raise PreflightError(redact(f"authentication failed at {shown} (GET /v1/models): {answer.text} ({how}); "
                                    "check the key the server expects"))
    if answer.status != 200:
        if target.model != "auto":  # reachable, but no /v1/models: trust the configured name
            return Preflight(target.model, {"status": answer.status}, {}, waited)
        raise PreflightError(redact(f"target {shown} answered GET /v1/models with {answer.text}, and "
                                    "target.model is auto: set target.model to the model's name"))
    data = answer.body.get("data") if isinstance(answer.body, dict) else None
    cards = [c for c in data if isinstance(c, dict) and isinstance(c.get("id"), str)] if isinstance(data, list) else []
    ids = [c["id"] for c in cards]
    models = {"ids": ids, "max_model_len": {c["id"]: c.get("max_model_len") for c in cards}}
    if target.model == "auto":
        if not ids:
            raise PreflightError(redact(f"target {shown} lists no models at GET /v1/models; "
                                        "set target.model to the model's name"))
        return Preflight(ids[0], models, answer.headers, waited)
    if ids and target.model not in ids:
        raise PreflightError(redact(f"model {target.model!r} is not served by {shown}; the server has: "
                                    f"{', '.join(ids)} (set target.model, e.g. --set target.model={ids[0]})"))
    return Preflight(target.model, models, answer.headers, waited)


class PromptTooLongError(ValueError):
    """A task's prompts are longer than the server's context: a configuration error (exit 2)."""


def _longest(dist: Any) -> float | None:
    """The longest value a length distribution can draw: its ``max``, a fixed value, else (an
    unbounded distribution) its mean, which half of the draws exceed."""
    spec = getattr(dist, "spec", None) or {}
    for key in ("max", "value"):
        if isinstance(spec.get(key), (int, float)):
            return float(spec[key])
    return float(dist.mean()) if hasattr(dist, "mean") else None


def prompt_tokens_bound(task: Any) -> float | None:
    """The longest prompt a task's configuration asks for, in tokens (``None``: from a dataset or
    a trace, not known before it is drawn). Summarization and extraction prompts are their
    document; a shared prefix comes on top."""
    if getattr(task, "dataset", None) is not None:
        return None
    dist = task.document_tokens if task.kind in ("summarization", "extraction") and task.document_tokens \
        else task.prompt_tokens
    longest = _longest(dist) if dist is not None else None
    if longest is None:
        return None
    prefix = getattr(task, "shared_prefix", None)
    return longest + (prefix.tokens if prefix is not None else 0)


def check_prompt_lengths(scenario: Any, pf: Preflight) -> None:
    """Refuse, before the first request, a task whose prompts cannot fit the served model's
    ``max_model_len`` (from ``/v1/models``; nothing is checked when the server does not say)."""
    limits = pf.models.get("max_model_len") if isinstance(pf.models, dict) else None
    limit = limits.get(pf.model) if isinstance(limits, dict) else None
    if type(limit) is not int or limit <= 0:
        return
    for task in scenario.traffic.classes:
        if task.weight <= 0:
            continue
        longest = prompt_tokens_bound(task)
        if longest is not None and longest > limit:
            field = "document_tokens" if task.kind in ("summarization", "extraction") else "prompt_tokens"
            raise PromptTooLongError(redact(
                f"task {task.name!r}: prompts of up to {longest:.0f} tokens (traffic.classes.{task.name}.{field}) "
                f"do not fit model {pf.model!r}, whose max_model_len is {limit} tokens (GET /v1/models); "
                f"lower the prompt lengths (or their max) below {limit}"))
