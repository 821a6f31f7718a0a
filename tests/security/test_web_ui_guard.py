"""The web UI answers only its own page, and the target's credentials go only to the target.

A real ``locust -f locustfiles/llm.py`` web UI (started as the README says, without
``--web-host``) with a key and a secret header planted, and a grabber server on 127.0.0.1
standing in for an attacker's host: another web site's form posts are refused and reach
nobody; the UI's own page (its session token) can still start a run; a host typed into the
start form gets none of the target's credentials.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from tests.helpers.procs import free_port, helper_server, wait_port
from tests.helpers.runs import ROOT, scenario_file
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.slow

KEY = "sk-guard-planted-key-9081726354"
GATEWAY = "gw-header-secret-5150"
EVIL = "http://evil.example"
QA = {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 20},
      "max_tokens": {"dist": "fixed", "value": 8}}


def scenario(tmp_path: Path) -> Path:
    return scenario_file(tmp_path, traffic={"seed": 1, "classes": {"qa": QA}},
                         load={"mode": "closed", "steps": [1], "warmup_s": 0, "step_duration_s": 2,
                               "stop_timeout_s": 1},
                         target={"api_key_env": "GUARD_TEST_KEY", "headers": {"X-Gateway-Token": GATEWAY},
                                 "metrics_url": None})


@contextlib.contextmanager
def web_ui(tmp_path: Path, host: str, *extra: str):
    """``locust -f locustfiles/llm.py`` with its web UI on a free port; yields (process, base URL)."""
    port = free_port()
    log = (tmp_path / f"locust-{port}.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py"), "--scenario",
         str(scenario(tmp_path)), "--host", host, "--web-port", str(port), "--out", str(tmp_path / f"run-{port}"),
         *extra],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "GUARD_TEST_KEY": KEY})
    try:
        wait_port(port, 60)
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        log.close()


def grabbed(grabber: str) -> list[dict]:
    return requests.get(grabber + "/_grabbed", timeout=5).json()["grabbed"]


def page_session(ui: str) -> tuple[requests.Session, str]:
    """A browser-like session that loaded the UI's page, and the page's token."""
    s = requests.Session()
    page = s.get(ui + "/", timeout=10)
    m = re.search(r'<meta name="tokenswarm-csrf" content="([^"]+)">', page.text)
    assert m, "the UI's page carries its session token"
    return s, m.group(1)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """(UI base URL, grabber URL, UI process) for a UI whose configured target is not the grabber."""
    tmp = tmp_path_factory.mktemp("guard")
    with helper_server("grabber.py", lifetime_s=300) as grabber, \
            helper_server("grabber.py", lifetime_s=300) as target, web_ui(tmp, target) as (proc, ui):
        yield ui, grabber, proc


def state_changes(grabber: str) -> list[tuple[str, dict]]:
    """Every state-changing route of the UI (Locust's and tokenswarm's) with an attacker's body."""
    return [
        ("/swarm", {"data": {"user_count": "1", "spawn_rate": "1", "host": grabber}}),
        ("/stop", {}),
        ("/stats/reset", {}),
        ("/user", {"json": {"user_class_name": "QAUser", "host": grabber}}),
        ("/tokenswarm/login_submit", {"data": {"username": "x", "password": "y"}}),
    ]


def test_the_web_ui_binds_127_0_0_1_when_started_with_locust_f(planted):
    ui, _, proc = planted
    port = int(ui.rsplit(":", 1)[1])
    listening = [c.laddr.ip for c in psutil.Process(proc.pid).net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert listening == ["127.0.0.1"], listening


def test_a_cross_origin_post_to_every_state_changing_route_is_refused_and_sends_nothing(planted):
    ui, grabber, _ = planted
    foreign = ({"Origin": EVIL}, {"Referer": EVIL + "/page.html"}, {"Origin": "null"}, {"Origin": "http://127.0.0.1:1"})
    for path, body in state_changes(grabber):
        for headers in foreign:
            r = requests.post(ui + path, headers=headers, timeout=10, **body)
            assert r.status_code == 403, (path, headers, r.status_code, r.text[:200])
    s, token = page_session(ui)  # even with the token (which another site cannot read), a foreign origin is refused
    for path, body in state_changes(grabber):
        for headers in foreign:
            r = s.post(ui + path, headers={**headers, "X-Tokenswarm-Csrf": token}, timeout=10, **body)
            assert r.status_code == 403, (path, headers, r.status_code, r.text[:200])
    time.sleep(1.5)  # a started run would preflight the grabber within milliseconds
    assert grabbed(grabber) == [], "a refused request reached the host it named"
    assert requests.get(ui + "/tokenswarm/status.json", timeout=5).json()["state"] != "running"


def test_a_same_origin_state_change_without_the_sessions_token_is_refused(planted):
    ui, grabber, _ = planted
    s, _ = page_session(ui)
    for path, body in state_changes(grabber):
        if path.endswith("login_submit"):
            continue  # the login form is held to the same-origin rule only
        for token in (None, "forged-token-value-that-is-long-enough-0000"):
            headers = {"Origin": ui} | ({"X-Tokenswarm-Csrf": token} if token else {})
            r = s.post(ui + path, headers=headers, timeout=10, **body)
            assert r.status_code == 403, (path, token, r.status_code)
            assert "X-Tokenswarm-Csrf" in r.json()["message"]
    time.sleep(1.0)  # not a synchronisation: an absence is checked (a started run would preflight within ms)
    assert grabbed(grabber) == []


def test_no_origin_may_read_the_ui_no_cors_headers_on_any_answer(planted):
    ui, _, _ = planted
    for path in ("/", "/stats/requests", "/tokenswarm/status.json", "/tokenswarm/llm.json", "/logs"):
        r = requests.get(ui + path, headers={"Origin": EVIL}, timeout=10)
        assert r.status_code == 200, path
        assert not [h for h in r.headers if h.lower().startswith("access-control-")], (path, dict(r.headers))
    pre = requests.options(ui + "/swarm", headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"},
                           timeout=10)
    assert "Access-Control-Allow-Origin" not in pre.headers


def test_the_uis_own_page_starts_a_run_and_a_host_changed_in_the_form_gets_no_credentials(planted):
    ui, grabber, _ = planted
    s, token = page_session(ui)
    status = s.get(ui + "/tokenswarm/status.json", timeout=5).json()
    assert status["credentials_to"] != "any host" and grabber not in status["credentials_to"]
    r = s.post(ui + "/swarm", data={"user_count": "1", "spawn_rate": "1", "host": grabber},
               headers={"Origin": ui, "X-Tokenswarm-Csrf": token}, timeout=10)
    assert r.status_code == 200 and r.json()["success"] is True, r.text[:300]
    got = wait_until(lambda: grabbed(grabber), 30, "the run to reach the host typed in the form")
    assert any(g["path"].endswith("/models") for g in got)
    for g in got:
        names = {k.lower() for k in g["headers"]}
        assert "authorization" not in names and "x-gateway-token" not in names, g
        assert KEY not in str(g) and GATEWAY not in str(g)
    s.post(ui + "/stop", headers={"Origin": ui, "X-Tokenswarm-Csrf": token}, timeout=10)


def test_a_script_gets_the_token_from_csrf_json_with_its_cookies(planted):
    ui, _, _ = planted
    s = requests.Session()
    token = s.get(ui + "/tokenswarm/csrf.json", timeout=5).json()["token"]
    r = s.post(ui + "/stats/reset", headers={"X-Tokenswarm-Csrf": token}, timeout=10)
    assert r.status_code == 200
    assert requests.post(ui + "/stats/reset", headers={"X-Tokenswarm-Csrf": token}, timeout=10).status_code == 403, \
        "the token belongs to the session that asked for it"


@pytest.mark.parametrize("how", ["configured target", "--credentials-to-any-host"])
def test_credentials_reach_the_configured_target_or_any_host_only_when_asked(tmp_path, how):
    with helper_server("grabber.py", lifetime_s=120) as grabber, helper_server("grabber.py", lifetime_s=120) as other:
        configured, extra = (grabber, ()) if how == "configured target" else (other, ("--credentials-to-any-host",))
        with web_ui(tmp_path, configured, *extra) as (_, ui):
            s, token = page_session(ui)
            assert s.get(ui + "/tokenswarm/status.json", timeout=5).json()["credentials_to"] == \
                ("any host" if extra else grabber + "")
            r = s.post(ui + "/swarm", data={"user_count": "1", "spawn_rate": "1", "host": grabber},
                       headers={"Origin": ui, "X-Tokenswarm-Csrf": token}, timeout=10)
            assert r.json()["success"] is True
            got = wait_until(lambda: grabbed(grabber), 30, "the run's first request")
    first = got[0]
    assert first["headers"].get("Authorization") == f"Bearer {KEY}"
    assert first["headers"].get("X-Gateway-Token") == GATEWAY
