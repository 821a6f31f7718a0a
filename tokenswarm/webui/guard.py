"""The web UI answers only its own page: no CORS, and state changes need the page's token.

Locust calls ``CORS(app)`` on its Flask app, which tells every web site that it may read every
answer of the UI (run state, the LLM table, logs). And its state-changing routes (``POST
/swarm``, ``/stop``, ``/stats/reset``, ``/user``) accept a plain form post, so any page open in
the same browser could start a run -- with the target's credentials -- against a host of its
choosing. :func:`install` closes both, for Locust's routes and tokenswarm's alike:

* **No CORS.** Flask-CORS's hook is removed and a WSGI middleware strips any
  ``Access-Control-*`` header from every answer (also on errors and ``OPTIONS``), so a browser
  lets no other origin read the UI.
* **Same origin.** A request with a method other than GET/HEAD/OPTIONS whose ``Origin`` (or,
  without one, ``Referer``) names another host or port than the request's ``Host`` is refused with 403
  before any view runs.
* **A per-session token.** The index page carries a random token (kept in the signed session
  cookie) in ``<meta name="tokenswarm-csrf">``, and ``static/csrf.js`` -- injected before
  Locust's own script -- adds it as the ``X-Tokenswarm-Csrf`` header to the page's same-origin
  requests. A state-changing request without the session's token is refused with 403. Scripts
  (curl) get the token from ``GET <base>/tokenswarm/csrf.json`` with their cookie jar.

The login form's post (``--web-login``) is held to the same-origin rule only: the login page
is Locust's and has no session yet to hold a token.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from flask import Response, jsonify, request, session

#: the header (or form field) that carries the session's token
CSRF_HEADER = "X-Tokenswarm-Csrf"
CSRF_FIELD = "tokenswarm_csrf"
SESSION_KEY = "tokenswarm_csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: injected right after ``<head>`` of Locust's index page: the token, then the script that sends it
HEAD_MARK = b"<!-- tokenswarm-csrf -->"


def install(environment: Any, *, login_paths: Iterable[str] = ()) -> None:
    """Guard ``environment.web_ui``'s app: no CORS, same origin and the session token for state changes.

    ``login_paths`` are POST routes held to the same-origin rule only (the login form).
    """
    ui = environment.web_ui
    app = ui.app
    if getattr(app, "tokenswarm_guarded", False):
        return
    app.tokenswarm_guarded = True
    _drop_flask_cors(app)
    app.wsgi_app = StripCors(app.wsgi_app)
    if not app.secret_key:
        app.secret_key = secrets.token_hex(32)  # the session (and its token) lasts as long as this process
    if not app.config.get("SESSION_COOKIE_SAMESITE"):
        app.config["SESSION_COOKIE_SAMESITE"] = "Lax"  # no session cookie on another site's form post
    opts = environment.parsed_options
    base = ((getattr(opts, "web_base_path", None) or "") if opts is not None else "").rstrip("/")
    exempt = {base + "/tokenswarm/login_submit", *login_paths}

    def _guard() -> Any:
        if request.method in SAFE_METHODS:
            return None
        foreign = foreign_origin(request.headers.get("Origin"), request.headers.get("Referer"), request.host)
        if foreign is not None:
            return _refuse(f"cross-origin {request.method} {request.path} refused (from {foreign})")
        if request.path in exempt:
            return None
        if not token_matches(request.headers.get(CSRF_HEADER) or request.form.get(CSRF_FIELD)):
            return _refuse(f"{request.method} {request.path} refused: no valid {CSRF_HEADER} token "
                           f"(load the UI's page, or GET {base}/tokenswarm/csrf.json)")
        return None

    def _inject_token(resp: Any) -> Any:
        if (request.path == base + "/" and resp.status_code == 200 and resp.mimetype == "text/html"
                and not resp.direct_passthrough):
            body = resp.get_data()
            if b"<head>" in body and HEAD_MARK not in body:
                resp.set_data(body.replace(b"<head>", b"<head>" + head_snippet(session_token()), 1))
        return resp

    app.before_request(_guard)
    app.after_request(_inject_token)

    def csrf_json() -> Any:
        return jsonify({"token": session_token(), "header": CSRF_HEADER})

    app.add_url_rule(base + "/tokenswarm/csrf.json", endpoint="tokenswarm_csrf",
                     view_func=ui.auth_required_if_enabled(csrf_json))


def head_snippet(token: str) -> bytes:
    """The tags put at the top of ``<head>``: the token and the script that sends it (before Locust's)."""
    return (HEAD_MARK + b'<meta name="tokenswarm-csrf" content="' + token.encode("ascii") + b'">'
            + b'<script src="./tokenswarm/static/csrf.js"></script>')


def session_token() -> str:
    """This browser session's token (made on first use; in Flask's signed session cookie)."""
    token = session.get(SESSION_KEY)
    if not isinstance(token, str) or len(token) < 32:
        token = session[SESSION_KEY] = secrets.token_urlsafe(32)
    return token


def token_matches(given: str | None) -> bool:
    expected = session.get(SESSION_KEY)
    if not given or not isinstance(expected, str) or not expected:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


def foreign_origin(origin: str | None, referer: str | None, host: str) -> str | None:
    """The foreign origin of a request to ``host`` (its ``Host`` header), or None when same-origin.

    ``Origin`` decides when present (``null``, sent by sandboxed frames and some redirects, is
    foreign); else the ``Referer``; a request with neither (curl) is not a browser's cross-site
    request and is left to the token.
    """
    source = origin if origin is not None else referer
    if source is None:
        return None
    if source.strip().lower() == "null":
        return "null"
    try:
        parts = urlsplit(source.strip())
        sport = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
        here = urlsplit("//" + host)
        hport = here.port
    except ValueError:
        return source[:200]
    shost, hhost = (parts.hostname or "").lower(), (here.hostname or "").lower()
    if not shost or shost != hhost:
        return source[:200]
    if hport is None:  # Host without a port: the default port of the page's scheme
        return None if sport in (80, 443) else source[:200]
    return None if sport == hport else source[:200]


def _refuse(message: str) -> Any:
    return Response(json.dumps({"success": False, "message": message}), status=403, mimetype="application/json")


def _drop_flask_cors(app: Any) -> None:
    """Remove Flask-CORS's after-request hook and its exception-handler wrappers from ``app``."""
    funcs = app.after_request_funcs.get(None, [])
    funcs[:] = [f for f in funcs if not _is_flask_cors(f)]
    for name in ("handle_exception", "handle_user_exception"):
        if name in vars(app):  # Flask-CORS wraps them on the instance; the class's method is the plain one
            delattr(app, name)


def _is_flask_cors(fn: Callable[..., Any]) -> bool:
    return (getattr(fn, "__module__", "") or "").startswith("flask_cors")


class StripCors:
    """WSGI middleware: no ``Access-Control-*`` header leaves the app, whoever set it."""

    def __init__(self, wsgi_app: Callable[..., Any]) -> None:
        self.wsgi_app = wsgi_app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            kept = [(k, v) for k, v in headers if not k.lower().startswith("access-control-")]
            return start_response(status, kept, exc_info) if exc_info is not None else start_response(status, kept)

        return self.wsgi_app(environ, start)
