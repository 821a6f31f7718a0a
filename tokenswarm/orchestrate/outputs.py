"""Locust's own outputs (``--html``, ``--csv``, ``--json``) carry no secret.

What Locust writes by itself, outside tokenswarm's sinks:

* ``--html`` renders the target host as given (``http://user:password@gateway``) and the
  exceptions' tracebacks. :func:`redact_locust_outputs` wraps the report renderer Locust's
  ``main`` calls so the file passes through :func:`tokenswarm.redact.redact` (the user info
  becomes ``***@``). If a future Locust renders it elsewhere, the run is refused with a clear
  message instead (:func:`html_refusal`) rather than writing the password.
* ``--csv`` and ``--json`` hold request names (tokenswarm's task names), counts, timings and
  the failure texts (built from the redacted records), plus Locust's exceptions table; the
  exceptions are redacted where Locust stores them (:func:`redact_exceptions`), so the CSV,
  the HTML report and the web UI all get the masked text.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from tokenswarm.redact import redact


def redact_locust_outputs() -> bool:
    """Make Locust's ``--html`` report redacted; False if this Locust renders it some other way."""
    main = sys.modules.get("locust.main")
    render = getattr(main, "get_html_report", None) if main is not None else None
    if render is None:
        return False
    if getattr(render, "tokenswarm_redacted", False):
        return True

    def redacted_report(*args: Any, **kwargs: Any) -> str:
        return str(redact(render(*args, **kwargs)))

    redacted_report.tokenswarm_redacted = True  # type: ignore[attr-defined]  # a mark on Locust's function: hooked once
    main.get_html_report = redacted_report  # type: ignore[union-attr]  # Locust's module attribute, replaced by the redacting one
    return True


def html_refusal(html_file: str | None, redacting: bool) -> str | None:
    """Why ``--html`` cannot be written safely, or None."""
    if not html_file or redacting:
        return None
    return ("--html: this Locust version writes its HTML report where tokenswarm cannot redact it, and it would "
            "hold the target URL's user info; use tokenswarm's own report (tokenswarm report RUN_DIR) instead")


def redact_exceptions(runner: Any) -> None:
    """Locust's exceptions table (web UI, ``--html``, ``--csv`` exceptions file) stores redacted text."""
    log_exception: Callable[..., Any] | None = getattr(runner, "log_exception", None)
    if log_exception is None or getattr(log_exception, "tokenswarm_redacted", False):
        return

    def redacted(node_id: str, msg: str, formatted_tb: str) -> Any:
        return log_exception(node_id, redact(msg), redact(formatted_tb))

    redacted.tokenswarm_redacted = True  # type: ignore[attr-defined]  # a mark on Locust's function: hooked once
    runner.log_exception = redacted
