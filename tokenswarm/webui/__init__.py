"""Live LLM metrics in Locust's web UI: an "LLM" tab, live charts, a CSV and the run report.

``install(environment, run)`` is called by :mod:`tokenswarm.orchestrate.plugin` on the master or
local process when Locust's web UI exists (not with ``--headless``, not on workers); ``run`` is
the read-only :class:`~tokenswarm.webui.view.RunView` of the run (the controller). It adds:

* the **LLM** tab (Locust ``extended_tabs``/``extended_tables``; rows injected into
  ``/stats/requests`` as ``extended_stats``) - per task and total: requests, failures,
  TTFT/TPOT/ITL percentiles, output tokens/s, tokens per chunk, spec-decode acceptance;
* ``/tokenswarm/charts`` - live charts drawn on ``<canvas>`` by a dependency-free script,
  fed by ``/tokenswarm/series.json`` (a ring buffer sampled every 2 s by a greenlet);
* ``/tokenswarm/llm.csv`` and ``/tokenswarm/llm.json`` - the table;
* ``/tokenswarm/report/`` - the analysis report of the finished run, built on first request;
* with ``--web-login`` and ``TOKENSWARM_WEB_PASSWORD`` set, a password login (:mod:`.login`);
* the guard (:mod:`.guard`): no CORS, and every state change (Locust's ``/swarm``, ``/stop``,
  ...) only from the UI's own page, with its session token.
"""

from __future__ import annotations

from typing import Any

from tokenswarm.webui.state import WebState
from tokenswarm.webui.view import RunSnapshot, RunView

__all__ = ["RunSnapshot", "RunView", "WebState", "install"]


def install(environment: Any, run: RunView, *, start_sampler: bool = True) -> WebState:
    """Hook the LLM views into ``environment.web_ui`` for the run ``run`` (read-only)."""
    # Flask and the routes: only when a web UI is installed (view.py is read without them)
    from tokenswarm.webui import guard
    from tokenswarm.webui.login import auto_enable  # Flask: only when a web UI is installed
    from tokenswarm.webui.routes import register  # Flask: only when a web UI is installed

    guard.install(environment)
    state = WebState(environment, run)
    register(environment, state)
    auto_enable(environment)  # --web-login with TOKENSWARM_WEB_PASSWORD set
    if start_sampler:
        state.start()
    environment.web_ui.tokenswarm = state  # for tests and other extensions
    return state
