"""Locust's own file outputs (--html, --csv, --json) never hold the target's password."""

from __future__ import annotations

import pytest

from tests.helpers.runs import run_locust, scenario_file
from tokenswarm.orchestrate.outputs import html_refusal, redact_exceptions
from tokenswarm.sim.testing import start_sim

PASSWORD = "gw-pass-html-31337"
QA = {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 20},
      "max_tokens": {"dist": "fixed", "value": 8}}


@pytest.mark.slow
def test_locusts_html_csv_and_json_files_get_the_redacted_host(tmp_path):
    sc = scenario_file(tmp_path, traffic={"seed": 1, "classes": {"qa": QA}},
                       load={"mode": "closed", "steps": [2], "warmup_s": 0, "step_duration_s": 2, "stop_timeout_s": 2},
                       target={"api_key_env": None, "metrics_url": None})
    out = tmp_path / "locust-out"
    with start_sim("--profile", "tiny-fast", "--basic-auth", f"gwuser:{PASSWORD}") as sim:
        host = sim.base_url.replace("http://", f"http://gwuser:{PASSWORD}@")
        res = run_locust(sc, host, tmp_path / "run", "--html", str(out / "report.html"), "--csv", str(out / "stats"),
                         "--json-file", str(out / "stats"))
    assert res.returncode == 0, res.stderr[-2000:]
    html = (out / "report.html").read_text()
    assert "gwuser:" not in html and PASSWORD not in html
    assert "http://***@127.0.0.1:" in html, "the report still names the (redacted) host"
    files = [p for p in out.iterdir() if p.is_file()]
    assert len(files) >= 4, files  # report.html, stats.json, stats_stats.csv, stats_failures.csv, ...
    for p in files:
        assert PASSWORD not in p.read_text(errors="replace"), p.name
    assert PASSWORD not in res.stdout + res.stderr


def test_html_is_refused_with_a_clear_message_when_it_cannot_be_redacted():
    why = html_refusal("report.html", redacting=False)
    assert why and "--html" in why and "tokenswarm report" in why
    assert html_refusal("report.html", redacting=True) is None and html_refusal(None, redacting=False) is None


def test_locusts_exceptions_table_stores_redacted_text():
    class Runner:
        def __init__(self):
            self.rows = []

        def log_exception(self, node_id, msg, formatted_tb):
            self.rows.append((msg, formatted_tb))

    r = Runner()
    redact_exceptions(r)
    r.log_exception("local", f"cannot reach http://gwuser:{PASSWORD}@gw:8000", "Authorization: Bearer sk-abcdefgh12345678")
    (msg, tb), = r.rows
    assert PASSWORD not in msg and "sk-abcdefgh12345678" not in tb
