"""Auth on every request to the target: one place builds the headers that carry it.

The target's credentials are the scenario's ``target.headers``, the key read from the
environment variable named by ``target.api_key_env`` (sent as ``Authorization: Bearer``) and
the user info of the base URL (``http://user:password@host``, sent as HTTP basic auth, the
usual form of a gateway in front of the server). Every request to the target -- completions,
``/v1/models`` at preflight, ``/tokenize`` for prompt sizing, the ``/metrics`` scraper --
takes its headers from :func:`target_headers`. The user info is taken out of the URL
(:func:`split_userinfo`): URLs are shown and stored without it, and it is registered with
:mod:`tokenswarm.redact` so it is never printed.

Credentials go only to the configured target. A process that runs load first calls
:func:`set_credentials_scope` with the target it was started for (``--host``, else the
scenario's ``target.base_url``); from then on :func:`target_headers` gives the scenario's
headers, key and URL password only for a base URL with the same scheme, host and port. A host
typed into the web UI's start form gets no credentials (only the user info of its own URL,
which its author typed) unless ``--credentials-to-any-host`` widened the scope.
"""

from __future__ import annotations

import base64
import logging
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


log = logging.getLogger("tokenswarm")

#: the origin (scheme, host, port) the target's credentials may go to; None = not scoped
_scope: tuple[str, str, int] | None = None
_scope_url: str | None = None
_any_host = False
_scoped = False
#: the configured target's own URL user info as basic auth (the web UI shows that URL masked)
_scope_basic: str | None = None
_warned: set[tuple[str, str, int] | None] = set()  # hosts already told they get no credentials


def origin(url: str | None) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of ``url`` with the scheme's default port; None if it has no host."""
    if not url:
        return None
    try:
        parts = urlsplit(url if "://" in url else "http://" + url)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    scheme = (parts.scheme or "http").lower()
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def set_credentials_scope(url: str | None, *, any_host: bool = False) -> None:
    """Send the target's credentials only to ``url``'s origin (or anywhere with ``any_host``).

    ``url`` is the target the process was configured with; None (no target configured) means
    no host gets the credentials unless ``any_host``.
    """
    global _scope, _scope_url, _scope_basic, _any_host, _scoped
    _scope = origin(split_userinfo(url)[0] if url else None)
    _scope_url = None if _scope is None else f"{_scope[0]}://{_scope[1]}:{_scope[2]}"
    _scope_basic = _basic_of(url)
    _any_host = any_host
    _scoped = True
    _warned.clear()


def clear_credentials_scope() -> None:
    """Back to unscoped (library use and tests): every base URL gets the credentials."""
    global _scope, _scope_url, _scope_basic, _any_host, _scoped
    _scope, _scope_url, _scope_basic, _any_host, _scoped = None, None, None, False, False
    _warned.clear()


def credentials_scope() -> str | None:
    """Who receives the credentials, for people: ``scheme://host:port``, ``"any host"`` or None (nobody)."""
    if not _scoped or _any_host:
        return "any host"
    return _scope_url


def credentials_allowed(base_url: str | None) -> bool:
    """Whether a request to ``base_url`` may carry the target's credentials."""
    if not _scoped or _any_host:
        return True
    return _scope is not None and origin(split_userinfo(base_url or "")[0]) == _scope


def target_headers(target: Any, base_url: str | None = None) -> dict[str, str]:
    """Headers carrying the target's auth: scenario headers, then Bearer key, else URL basic auth.

    The scenario's own ``Authorization`` header is kept unless an API key is configured (the
    key is the documented way); basic auth from the URL is used only when neither gives one.
    Outside the credentials scope (:func:`set_credentials_scope`) only ``base_url``'s own user
    info is sent: the scenario's headers, key and URL password stay home.
    """
    if not credentials_allowed(base_url):
        _warn_withheld(target, base_url)
        basic = _basic_of(base_url)
        return {"Authorization": basic} if basic else {}
    headers = dict(target.headers)
    key = target.api_key()
    redact.remember_target(target, base_url)
    if key:
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Authorization"] = f"Bearer {key}"
    has_auth = any(k.lower() == "authorization" for k in headers)
    if not has_auth:
        # a masked URL (the web UI's form shows "http://***@gateway", and posts it back) is the
        # configured target's: its user info is the one the process was started with
        masked = bool(base_url) and "@" in (base_url or "") and _basic_of(base_url) is None
        for basic in (_basic_of(base_url), _scope_basic if masked else None, _basic_of(target.base_url)):
            if basic:
                headers["Authorization"] = basic
                break
    return headers


def _basic_of(url: str | None) -> str | None:
    """Basic auth from ``url``'s user info; None without one or when it is redaction's mask."""
    if not url or redact.MASK + "@" in url or redact.MASK + ":" in url.split("@", 1)[0]:
        return None
    return split_userinfo(url)[1]


def _warn_withheld(target: Any, base_url: str | None) -> None:
    """Say once per host that the target's credentials are withheld from it (it may answer 401)."""
    where = origin(split_userinfo(base_url or "")[0])
    has_credentials = bool(target.headers) or bool(target.api_key()) or bool(split_userinfo(target.base_url or "")[1])
    if where in _warned or not has_credentials:
        return
    _warned.add(where)
    shown = f"{where[0]}://{where[1]}:{where[2]}" if where else repr(base_url)
    log.warning("tokenswarm: %s is not the configured target (%s): the target's credentials are not sent "
                "to it; start with --credentials-to-any-host to send them", shown, _scope_url or "none configured")


def url_headers(url: str) -> tuple[str, dict[str, str]]:
    """A metrics endpoint of its own (``extra_metrics``): its URL without user info, and its basic auth."""
    clean, basic = split_userinfo(url)
    return clean, ({"Authorization": basic} if basic else {})
