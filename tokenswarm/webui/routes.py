"""Flask routes and Locust template hooks of the LLM web UI.

Everything is served by Locust's own web app under ``<--web-base-path>/tokenswarm/``, behind
``auth_required_if_enabled`` (so ``--web-login`` protects it like Locust's pages). No file
is fetched from the network: the chart page and its script ship in ``webui/static``.
"""

from __future__ import annotations

import html
import json
from functools import partial
from pathlib import Path
from typing import Any, Callable

from flask import Response, jsonify, redirect, request, send_from_directory

from tokenswarm.redact import redact_bytes
from tokenswarm.webui.series import CHARTS
from tokenswarm.webui.state import WebState
from tokenswarm.webui.table import rows_to_csv, table_structure
from tokenswarm.wire.auth import credentials_scope

STATIC_DIR = Path(__file__).parent / "static"


def charts_page() -> str:
    """static/charts.html with its charts from the table (webui/series.py ``CHARTS``): each
    canvas names the sample fields it draws and their legend labels, so the script spells none."""
    sections = "\n".join(
        f'  <section><h2>{html.escape(c.title)}</h2><canvas id="{c.element_id}" '
        f'data-series="{html.escape(",".join(k for k, _ in c.lines))}" '
        f'data-labels="{html.escape(",".join(label for _, label in c.lines))}"></canvas></section>'
        for c in CHARTS)
    return (STATIC_DIR / "charts.html").read_text().replace("<!-- charts -->", sections)
TAB_KEY = "llm"
#: Injected into Locust's index page: a small bar with links to the charts, CSV and report.
LINKS_SCRIPT = b'<script src="./tokenswarm/static/links.js" defer></script>'


Route = Callable[[str, str], Callable[[Callable[..., Any]], Callable[..., Any]]]


def register(environment: Any, state: WebState) -> None:
    """Add the LLM tab, its CSV/charts/report links and the ``/tokenswarm/*`` routes."""
    ui = environment.web_ui
    app = ui.app
    opts = environment.parsed_options
    base = ((getattr(opts, "web_base_path", None) or "") if opts is not None else "").rstrip("/")
    prefix = base + "/tokenswarm"
    auth = ui.auth_required_if_enabled
    _add_tab(ui.template_args)
    app.after_request(partial(_inject, state, base))

    def route(rule: str, endpoint: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            app.add_url_rule(prefix + rule, endpoint="tokenswarm_" + endpoint, view_func=auth(fn))
            return fn
        return deco

    _live_routes(route, state)
    _report_routes(route, state, home=base + "/")


def _add_tab(template_args: dict[str, Any]) -> None:
    """The LLM tab and table in Locust's page, and the links to the CSV, charts and report."""
    template_args["extended_tabs"] = [*_others(template_args.get("extended_tabs"), TAB_KEY),
                                      {"title": "LLM", "key": TAB_KEY}]
    template_args["extended_tables"] = [*_others(template_args.get("extended_tables"), TAB_KEY),
                                        {"key": TAB_KEY, "structure": table_structure()}]
    template_args["extended_csv_files"] = [
        *(template_args.get("extended_csv_files") or []),
        {"href": "./tokenswarm/llm.csv", "title": "LLM statistics CSV (tokenswarm)"},
        {"href": "./tokenswarm/charts", "title": "LLM live charts (tokenswarm)"},
        {"href": "./tokenswarm/report/", "title": "Run report (tokenswarm, after the run)"},
    ]


def _inject(state: WebState, base: str, resp: Any) -> Any:
    """After every response of the web app (Locust's too): secrets redacted, the LLM rows in
    Locust's stats JSON, the links bar in its index page."""
    resp = _redacted(resp)
    path = request.path
    if path.endswith("/stats/requests") and resp.status_code == 200 and resp.is_json:
        data = resp.get_json()
        data["extended_stats"] = [*_others(data.get("extended_stats"), TAB_KEY),
                                  {"key": TAB_KEY, "data": state.rows()}]
        resp.set_data(json.dumps(data))
    elif (path == base + "/" and resp.status_code == 200 and resp.mimetype == "text/html"
          and not resp.direct_passthrough):
        body = resp.get_data()
        if b"</body>" in body and LINKS_SCRIPT not in body:
            resp.set_data(body.replace(b"</body>", LINKS_SCRIPT + b"</body>", 1))
    return resp


def _live_routes(route: Route, state: WebState) -> None:
    """The live table (JSON, CSV), the chart series, the run's status, the chart page and its files."""

    @route("/llm.json", "table")
    def table_json() -> Any:
        return jsonify({"run_id": state.run_id, "state": state.state(), "columns": table_structure(),
                        "rows": state.rows()})

    @route("/llm.csv", "csv")
    def table_csv() -> Any:
        name = f"tokenswarm_llm_{state.run_id or 'no-run'}.csv"
        return Response(rows_to_csv(state.rows()), mimetype="text/csv",
                        headers={"Content-Disposition": f"attachment;filename={name}"})

    @route("/series.json", "series")
    def series_json() -> Any:
        since = request.args.get("since", type=float)
        if state.state() == "finished":
            state.sample_once()  # the final sample, now rather than at the sampler's next tick
        return jsonify({"run_id": state.run_id, "state": state.state(), "interval_s": state.interval_s,
                        "samples": state.sampler.since(since)})

    @route("/status.json", "status")
    def status_json() -> Any:
        run_dir = state.run_dir
        report = state.reports.state(Path(run_dir)) if run_dir is not None and state.state() == "finished" else None
        return jsonify({"run_id": state.run_id, "state": state.state(), "run_dir": None if run_dir is None else str(run_dir),
                        "report": report, "credentials_to": credentials_scope()})

    @route("/charts", "charts")
    def charts() -> Any:
        return Response(charts_page(), mimetype="text/html")

    @route("/static/<path:name>", "static")
    def static(name: str) -> Any:
        return send_from_directory(STATIC_DIR, name)


def _report_routes(route: Route, state: WebState, home: str) -> None:
    """The run's report: built once the run has finished, then served with its files."""

    @route("/report", "report_bare")
    def report_bare() -> Any:
        return redirect(request.path + "/")  # so the report's relative links resolve under /report/

    @route("/report/", "report")
    def report() -> Any:
        run_dir = state.run_dir
        if run_dir is None or state.state() != "finished":
            msg = ("No run yet: start one, the report is built when it ends." if run_dir is None else
                   "The run is still going: the report is built when it ends (stop it, or wait for the last step).")
            return _page("Report not available yet", msg, refresh=False, home=home), 409
        run_dir = Path(run_dir)
        st = state.reports.ensure(run_dir, retry=request.args.get("retry") == "1")
        if st == "ready":
            return send_from_directory(state.reports.out_dir(run_dir).resolve(), "report.html")
        if st == "failed":
            text = state.reports.errors.get(run_dir, "unknown error") + "\n\n(Open this page with ?retry=1 to try again.)"
            return _page("Report failed", text, refresh=False, home=home), 500
        return _page("Building the report…", f"Analysing {run_dir} - this page reloads by itself.", refresh=True, home=home), 202

    @route("/report/<path:name>", "report_file")
    def report_file(name: str) -> Any:
        run_dir = state.run_dir
        if run_dir is None or state.reports.state(Path(run_dir)) != "ready":
            return _page("Report not available yet", "Open the report page first.", refresh=False, home=home), 404
        return send_from_directory(state.reports.out_dir(Path(run_dir)).resolve(), name)


def _redacted(resp: Any) -> Any:
    """The response with :func:`tokenswarm.redact.redact_bytes` applied to a buffered text body."""
    if resp.direct_passthrough or resp.is_streamed:
        return resp
    if resp.mimetype and (resp.mimetype.startswith("text/") or resp.mimetype.endswith(("json", "javascript"))):
        body = resp.get_data()
        clean = redact_bytes(body)
        if clean != body:
            resp.set_data(clean)
    return resp


def _others(items: list[dict[str, Any]] | None, key: str) -> list[dict[str, Any]]:
    """Entries of another extension (installing twice does not duplicate ours)."""
    return [x for x in (items or []) if x.get("key") != key]


def _page(title: str, text: str, refresh: bool, home: str = "/") -> str:
    meta = '<meta http-equiv="refresh" content="2">' if refresh else ""
    return (f"<!doctype html><html><head><meta charset='utf-8'>{meta}<title>{html.escape(title)}</title></head>"
            f"<body style='font-family:sans-serif;margin:2em'><h1>{html.escape(title)}</h1>"
            f"<pre style='white-space:pre-wrap'>{html.escape(text)}</pre>"
            f"<p><a href='{html.escape(home)}'>Back to Locust</a></p></body></html>")
