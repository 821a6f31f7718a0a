"""Username/password login for Locust's ``--web-login`` (Flask-Login), for shared machines.

Locust's ``--web-login`` only turns the login requirement on; the locustfile must supply the
user loader and a form callback. :func:`enable_password_login` does that with a password
check you give it. tokenswarm calls it by itself when ``--web-login`` is on and
``TOKENSWARM_WEB_PASSWORD`` is set (user name ``TOKENSWARM_WEB_USER``, default ``tokenswarm``).
The password is read from the environment only and never shown or logged.
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from collections.abc import Callable
from typing import Any

from flask import redirect, request, session, url_for
from flask_login import UserMixin, login_user

log = logging.getLogger("tokenswarm")

USER_VAR = "TOKENSWARM_WEB_USER"
PASSWORD_VAR = "TOKENSWARM_WEB_PASSWORD"


def env_password_check(user_var: str = USER_VAR, password_var: str = PASSWORD_VAR) -> Callable[[str, str], bool] | None:
    """A check against the user name and password in the environment; None if no password is set."""
    password = os.environ.get(password_var)
    if not password:
        return None
    user = os.environ.get(user_var) or "tokenswarm"

    def check(username: str, given: str) -> bool:
        ok_user = hmac.compare_digest(username.encode(), user.encode())
        ok_pass = hmac.compare_digest(given.encode(), password.encode())
        return ok_user and ok_pass

    return check


def enable_password_login(environment: Any, check: Callable[[str, str], bool]) -> None:
    """Make Locust's ``--web-login`` page accept users for whom ``check(username, password)`` is true."""
    ui = environment.web_ui
    if ui is None or not ui.web_login:
        return
    opts = environment.parsed_options
    base = ((getattr(opts, "web_base_path", None) or "") if opts is not None else "").rstrip("/")
    if not ui.app.secret_key:
        ui.app.secret_key = secrets.token_hex(32)  # sessions last as long as this process

    class WebUser(UserMixin):  # type: ignore[misc]  # flask-login ships no types
        def __init__(self, user_id: str) -> None:
            self.id = user_id

    ui.login_manager.user_loader(WebUser)
    ui.auth_args = {**ui.auth_args, "username_password_callback": base + "/tokenswarm/login_submit"}

    def login_submit() -> Any:
        username = request.form.get("username", "")
        if username and check(username, request.form.get("password", "")):
            login_user(WebUser(username))
            return redirect(url_for("locust.index"))
        session["auth_error"] = "Invalid user name or password"
        return redirect(url_for("locust.login"))

    ui.app.add_url_rule(base + "/tokenswarm/login_submit", endpoint="tokenswarm_login_submit",
                        view_func=login_submit, methods=["POST"])


def auto_enable(environment: Any) -> None:
    """Called by :func:`tokenswarm.webui.install`: wire the environment's password if ``--web-login``."""
    ui = environment.web_ui
    if ui is None or not ui.web_login:
        return
    check = env_password_check()
    if check is None:
        log.warning("tokenswarm: --web-login is on but %s is not set; configure login in your locustfile "
                    "(see docs: 'The web UI' > 'Login on shared machines')", PASSWORD_VAR)
        return
    enable_password_login(environment, check)
