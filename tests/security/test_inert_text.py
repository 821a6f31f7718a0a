"""Server text is inert wherever tokenswarm prints or stores it: control characters (terminal
escapes, OSC titles, carriage returns) are written as visible ``\\xNN`` escapes."""

from __future__ import annotations

import io
import json
import logging

import pytest

from tests.analysis.runfactory import failed, record, write_run
from tokenswarm import cli, redact
from tokenswarm.load.breaker import CircuitBreaker
from tokenswarm.load.preflight import Answer, PreflightError, preflight
from tokenswarm.wire.reported import error_from_body
from tokenswarm.workload.scenario import parse_scenario

CLEAR = "\x1b[2J"  # clear the screen
TITLE = "\x1b]0;pwned\x07"  # set the window title
HOSTILE = f"engine{CLEAR} died{TITLE}\r\x9b31m over"


def raw_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 32 and c not in "\t\n") or 0x7f <= ord(c) <= 0x9f]


def test_inert_escapes_every_control_but_tab_and_newline_and_keeps_the_text():
    out = redact.inert(HOSTILE + "\tok\n")
    assert out == "engine\\x1b[2J died\\x1b]0;pwned\\x07\\x0d\\x9b31m over\tok\n"
    assert redact.inert(out) == out and redact.redact(HOSTILE) == redact.inert(HOSTILE)


def test_a_servers_error_body_becomes_an_inert_record_error():
    body = {"error": {"message": HOSTILE, "type": "X"}}  # JSON escapes the controls: \u001b ...
    err = error_from_body(500, json.dumps(body).encode())
    assert err.startswith("HTTP 500: X: engine\\x1b[2J") and raw_controls(err) == []


def test_the_circuit_breakers_message_is_inert():
    b = CircuitBreaker(threshold=2)
    b.observe("http_error", 500, HOSTILE)
    msg = b.observe("http_error", 500, HOSTILE)
    assert msg and "engine\\x1b[2J" in msg and raw_controls(msg) == []


def test_the_wrong_model_preflight_error_is_inert():
    t = parse_scenario({"name": "t", "target": {"base_url": "http://127.0.0.1:9", "model": "mine"},
                        "traffic": {"classes": {"qa": {"weight": 1}}}}, "<t>").target
    answer = Answer(200, {"data": [{"id": f"model{CLEAR}{TITLE}"}]})
    with pytest.raises(PreflightError) as e:
        preflight("http://127.0.0.1:9", t, get=lambda *a: answer)
    assert "model\\x1b[2J" in str(e.value) and raw_controls(str(e.value)) == []


def test_log_lines_are_inert():
    redact.install_log_redaction()
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    log = logging.getLogger("tokenswarm.test_inert")
    log.addHandler(handler)
    try:
        log.error("tokenswarm: run %s (target %s, model %s)", "r1", "http://127.0.0.1:9", HOSTILE)
    finally:
        log.removeHandler(handler)
    assert "engine\\x1b[2J" in buf.getvalue() and raw_controls(buf.getvalue()) == []


def test_the_report_prints_and_stores_server_text_inert(tmp_path, capsys):
    recs = [record(i) for i in range(30)] + [failed(30 + i, outcome="http_error", http_status=500,
                                                    error=f"HTTP 500: {HOSTILE}") for i in range(5)]
    run = write_run(tmp_path / "run", recs)
    assert cli.main(["report", str(run), "--no-plots"]) == 0
    shown = capsys.readouterr()
    assert raw_controls(shown.out + shown.err) == []
    stored = {p.name: p.read_text(errors="replace") for p in (run / "report").iterdir() if p.suffix in (".md", ".csv")}
    assert "report.md" in stored and "errors.csv" in stored
    assert "\\x1b[2J" in stored["errors.csv"]  # the text is there, escaped
    assert {name: raw_controls(text) for name, text in stored.items()} == {name: [] for name in stored}
