"""The web UI's guard (tokenswarm.webui.guard) and the credentials scope (tokenswarm.wire.auth), fast.

Flask's test client on a real Locust web UI with tokenswarm installed; the process-level
checks (a real browser, a real run reaching a grabber) are in tests/security/test_web_ui_guard.py
and tests/webui/test_browser.py.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from locust.env import Environment

from tokenswarm.load.users import QAUser
from tokenswarm.orchestrate.controller import RunController
from tokenswarm.webui import install
from tokenswarm.webui.guard import foreign_origin
from tokenswarm.wire import auth
from tokenswarm.workload.scenario import load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
STATE_CHANGES = ("/swarm", "/stop", "/stats/reset", "/user")


@pytest.fixture(autouse=True)
def locust_argv(monkeypatch):
    monkeypatch.setattr("sys.argv", ["locust"])


@pytest.fixture
def client():
    env = Environment(user_classes=[QAUser])
    env.create_local_runner()
    env.create_web_ui("127.0.0.1", 0, delayed_start=True)
    started = []
    env.runner.start = lambda *a, **kw: started.append(a)  # what /swarm would do: start load
    install(env, RunController(env, load_scenario(str(ROOT / "scenarios" / "mix.yaml")), fixed_users=False),
            start_sampler=False)
    yield env.web_ui.app.test_client(), started
    env.runner.quit()


def page_token(c) -> str:
    m = re.search(r'<meta name="tokenswarm-csrf" content="([^"]+)">', c.get("/").get_data(as_text=True))
    assert m
    return m.group(1)


def test_the_index_page_carries_the_token_and_its_script_before_locusts_own(client):
    c, _ = client
    body = c.get("/").get_data(as_text=True)
    head = body.split("</head>", 1)[0]
    assert head.index('name="tokenswarm-csrf"') < head.index("tokenswarm/static/csrf.js") < head.index('type="module"')
    assert c.get("/tokenswarm/static/csrf.js").status_code == 200


def test_every_state_change_from_another_origin_is_refused_before_it_runs(client):
    c, started = client
    token = page_token(c)
    for path in STATE_CHANGES:
        for headers in ({"Origin": "http://evil.example"}, {"Referer": "http://evil.example/x"}, {"Origin": "null"}):
            r = c.post(path, data={"user_count": "1", "spawn_rate": "1"}, headers={**headers, "X-Tokenswarm-Csrf": token})
            assert r.status_code == 403, (path, headers)
    assert c.post("/tokenswarm/login_submit", headers={"Origin": "http://evil.example"}).status_code == 403
    assert started == []


def test_a_state_change_needs_the_sessions_token_and_then_works(client):
    c, started = client
    for path in STATE_CHANGES:
        assert c.post(path, headers={"Origin": "http://localhost"}).status_code == 403, path
    token = page_token(c)
    r = c.post("/swarm", data={"user_count": "1", "spawn_rate": "1"},
               headers={"Origin": "http://localhost", "X-Tokenswarm-Csrf": token})
    assert r.status_code == 200 and r.get_json()["success"] is True
    assert c.post("/stats/reset", headers={"X-Tokenswarm-Csrf": c.get("/tokenswarm/csrf.json").get_json()["token"]}
                  ).status_code == 200


def test_no_answer_carries_cors_headers(client):
    c, _ = client
    for method, path in (("GET", "/"), ("GET", "/stats/requests"), ("GET", "/tokenswarm/status.json"),
                         ("OPTIONS", "/swarm"), ("GET", "/no-such-page")):
        r = c.open(path, method=method, headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
        assert not [k for k, _ in r.headers.items() if k.lower().startswith("access-control-")], (method, path)


@pytest.mark.parametrize(("source", "host", "foreign"), [
    ("http://127.0.0.1:8089", "127.0.0.1:8089", False),
    ("http://LOCALHOST:8089/page", "localhost:8089", False),
    ("https://ui.example", "ui.example", False),
    ("http://ui.example", "ui.example:80", False),
    ("http://127.0.0.1:9999", "127.0.0.1:8089", True),
    ("http://evil.example", "127.0.0.1:8089", True),
    ("http://127.0.0.1.evil.example:8089", "127.0.0.1:8089", True),
    ("null", "127.0.0.1:8089", True),
])
def test_same_origin_is_host_and_port_of_the_ui(source, host, foreign):
    assert (foreign_origin(source, None, host) is not None) is foreign
    assert (foreign_origin(None, source, host) is not None) is foreign, "the Referer decides without an Origin"


def test_a_request_without_origin_or_referer_is_left_to_the_token():
    assert foreign_origin(None, None, "127.0.0.1:8089") is None


@pytest.fixture
def scoped():
    yield auth
    auth.clear_credentials_scope()


def gateway_target():
    return parse_scenario({"name": "t", "target": {"base_url": "http://u:url-pass-77@10.0.0.5:8000/v1",
                                                   "api_key_env": "GUARD_UNIT_KEY",
                                                   "headers": {"X-Gateway-Token": "hdr-secret-88"}},
                           "traffic": {"classes": {"qa": {"weight": 1}}}}, "<t>").target


def test_credentials_go_only_to_the_configured_targets_scheme_host_and_port(scoped, monkeypatch, caplog):
    monkeypatch.setenv("GUARD_UNIT_KEY", "sk-unit-key-12345678")
    t = gateway_target()
    scoped.set_credentials_scope("http://u:url-pass-77@10.0.0.5:8000/v1")
    assert scoped.credentials_scope() == "http://10.0.0.5:8000"
    full = scoped.target_headers(t, "http://10.0.0.5:8000/v1")
    assert full["Authorization"] == "Bearer sk-unit-key-12345678" and full["X-Gateway-Token"] == "hdr-secret-88"
    for other in ("http://127.0.0.1:9/v1", "http://10.0.0.5:8001/v1", "https://10.0.0.5:8000/v1", "http://10.0.0.6:8000"):
        assert scoped.target_headers(t, other) == {}, other
    own = scoped.target_headers(t, "http://me:typed-pw@127.0.0.1:9/v1")
    assert own == {"Authorization": "Basic " + base64.b64encode(b"me:typed-pw").decode()}, "only its own user info"
    told = [r.getMessage() for r in caplog.records if "not the configured target" in r.getMessage()]
    assert sum("http://127.0.0.1:9 " in m for m in told) == 1, "said once per host, naming the flag"
    assert all("--credentials-to-any-host" in m and "url-pass-77" not in m for m in told)


def test_credentials_to_any_host_only_when_asked_and_to_no_host_without_a_target(scoped, monkeypatch):
    monkeypatch.setenv("GUARD_UNIT_KEY", "sk-unit-key-12345678")
    t = gateway_target()
    scoped.set_credentials_scope("http://10.0.0.5:8000", any_host=True)
    assert scoped.credentials_scope() == "any host"
    assert scoped.target_headers(t, "http://127.0.0.1:9")["Authorization"] == "Bearer sk-unit-key-12345678"
    scoped.set_credentials_scope(None)
    assert scoped.credentials_scope() is None and scoped.target_headers(t, "http://10.0.0.5:8000") == {}
    assert auth.origin("http://h") == auth.origin("http://h:80/x") != auth.origin("https://h")


def test_the_forms_masked_url_of_the_configured_target_keeps_its_basic_auth(scoped):
    t = parse_scenario({"name": "t", "target": {"base_url": "http://127.0.0.1:9/v1"},
                        "traffic": {"classes": {"qa": {"weight": 1}}}}, "<t>").target
    scoped.set_credentials_scope("http://gw:gw-pass-4242@10.0.0.5:8000/v1")  # --host with user info
    # the UI shows (and posts back) the host masked: the run still authenticates as configured
    h = scoped.target_headers(t, "http://***@10.0.0.5:8000/v1")
    assert h == {"Authorization": "Basic " + base64.b64encode(b"gw:gw-pass-4242").decode()}
    assert scoped.target_headers(t, "http://***@10.0.0.6:8000/v1") == {}, "another host still gets nothing"
