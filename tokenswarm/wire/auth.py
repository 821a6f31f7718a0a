"""Auth on every request to the target: one place builds the headers that carry it.

The target's credentials are the scenario's ``target.headers``, the key read from the
environment variable named by ``target.api_key_env`` (sent as ``Authorization: Bearer``) and
the user info of the base URL (``http://user:password@host``, sent as HTTP basic auth, the
usual form of a gateway in front of the server). Every request to the target -- completions,
``/v1/models`` at preflight, ``/tokenize`` for prompt sizing, the ``/metrics`` scraper --
takes its headers from :func:`target_headers`. The user info is taken out of the URL
(:func:`split_userinfo`): URLs are shown and stored without it, and it is registered with
:mod:`tokenswarm.redact` so it is never printed.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from tokenswarm import redact


def split_userinfo(url: str) -> tuple[str, str | None]:
    """``(url without user info, "Basic ..." header value or None)``."""
    if not url or "@" not in url:
        return url, None
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    redact.remember(*redact.url_secrets(url))
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    creds = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    basic = "Basic " + base64.b64encode(creds.encode("utf-8")).decode("ascii")
    redact.remember(basic.split(" ", 1)[1])
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)), basic


def target_headers(target: Any, base_url: str | None = None) -> dict[str, str]:
    """Headers carrying the target's auth: scenario headers, then Bearer key, else URL basic auth.

    The scenario's own ``Authorization`` header is kept unless an API key is configured (the
    key is the documented way); basic auth from the URL is used only when neither gives one.
    """
    headers = dict(target.headers)
    key = target.api_key()
    redact.remember_target(target, base_url)
    if key:
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Authorization"] = f"Bearer {key}"
    has_auth = any(k.lower() == "authorization" for k in headers)
    if not has_auth:
        for url in (base_url, target.base_url):
            basic = split_userinfo(url or "")[1]
            if basic:
                headers["Authorization"] = basic
                break
    return headers


def url_headers(url: str) -> tuple[str, dict[str, str]]:
    """A metrics endpoint of its own (``extra_metrics``): its URL without user info, and its basic auth."""
    clean, basic = split_userinfo(url)
    return clean, ({"Authorization": basic} if basic else {})
