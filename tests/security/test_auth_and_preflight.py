"""Auth headers for every request kind, and the preflight's decisions (time and HTTP injected)."""

from __future__ import annotations

import base64

import pytest

from tokenswarm import redact
from tokenswarm.load.preflight import Answer, PreflightError, PromptTooLongError, check_prompt_lengths, preflight
from tokenswarm.wire.auth import split_userinfo, target_headers, url_headers
from tokenswarm.workload.scenario import parse_scenario

pytestmark = pytest.mark.usefixtures("fresh_redaction_registry")


def target(**fields):
    t = {"base_url": "http://127.0.0.1:9/v1", **fields}
    return parse_scenario({"name": "t", "target": t, "traffic": {"classes": {"qa": {"weight": 1}}}}, "<t>").target


def test_url_user_info_becomes_basic_auth_and_leaves_the_url():
    url, basic = split_userinfo("http://bob:p%40ss@gw.example:8080/v1")
    assert url == "http://gw.example:8080/v1"
    assert basic == "Basic " + base64.b64encode(b"bob:p@ss").decode()
    assert redact.redact("p@ss and " + basic) == "*** and Basic ***"


def test_a_url_without_user_info_is_unchanged():
    assert split_userinfo("https://h:1/v1") == ("https://h:1/v1", None)


def test_the_api_key_is_sent_as_bearer_and_wins_over_a_scenario_authorization(monkeypatch):
    monkeypatch.setenv("I18_KEY", "sk-test-0000aaaa")
    h = target_headers(target(api_key_env="I18_KEY", headers={"Authorization": "Bearer other", "X-Org": "o"}))
    assert h == {"X-Org": "o", "Authorization": "Bearer sk-test-0000aaaa"}


def test_url_basic_auth_is_used_when_no_key_or_header_gives_one():
    h = target_headers(target(), "http://u:pw-1234@127.0.0.1:9/v1")
    assert h["Authorization"] == "Basic " + base64.b64encode(b"u:pw-1234").decode()


def test_an_extra_metrics_endpoint_gets_only_its_own_urls_auth():
    assert url_headers("http://exporter:9400/metrics") == ("http://exporter:9400/metrics", {})
    url, h = url_headers("http://m:mpw-9876@exporter:9400/metrics")
    assert url == "http://exporter:9400/metrics" and h["Authorization"].startswith("Basic ")


class FakeServer:
    """Answers in order; records the headers of every probe; time advances by each sleep."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.seen: list[dict[str, str]] = []
        self.now = 0.0

    def get(self, url, headers, timeout_s, verify_tls):
        self.seen.append(dict(headers))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def clock(self):
        return self.now

    def sleep(self, s):
        self.now += s


MODELS = Answer(200, {"data": [{"id": "m-a", "max_model_len": 4096}, {"id": "m-b"}]})
DOWN = Answer(None, None, "URLError: [Errno 111] Connection refused")


def run(srv: FakeServer, t, wait_s=0.0, base="http://127.0.0.1:9/v1"):
    return preflight(base, t, wait_s, get=srv.get, clock=srv.clock, sleep=srv.sleep)


def test_auto_model_is_the_first_listed_and_only_ids_are_kept():
    pf = run(FakeServer(MODELS), target())
    assert pf.model == "m-a" and pf.models == {"ids": ["m-a", "m-b"], "max_model_len": {"m-a": 4096, "m-b": None}}


def test_a_model_the_server_does_not_have_fails_naming_the_models_it_has():
    with pytest.raises(PreflightError) as e:
        run(FakeServer(MODELS), target(model="llama-3-70b"))
    assert "'llama-3-70b' is not served" in str(e.value) and "m-a, m-b" in str(e.value)


def test_a_rejected_key_fails_at_once_with_a_message_that_says_authentication(monkeypatch):
    monkeypatch.setenv("I18_KEY", "sk-wrong-0000bbbb")
    srv = FakeServer(Answer(401, None, "HTTP 401: Unauthorized"))
    with pytest.raises(PreflightError) as e:
        run(srv, target(api_key_env="I18_KEY"), wait_s=30)
    assert "authentication failed" in str(e.value) and "$I18_KEY" in str(e.value)
    assert "sk-wrong-0000bbbb" not in str(e.value)
    assert len(srv.seen) == 1 and srv.seen[0]["Authorization"] == "Bearer sk-wrong-0000bbbb"


def test_preflight_waits_for_a_server_that_is_starting_up_to_the_bound():
    srv = FakeServer(DOWN, DOWN, DOWN, MODELS)
    pf = run(srv, target(), wait_s=10)
    assert pf.model == "m-a" and len(srv.seen) == 4 and pf.waited_s == 3.0


def test_preflight_gives_up_when_the_bound_is_reached_and_says_how_long_it_waited():
    srv = FakeServer(DOWN)
    with pytest.raises(PreflightError) as e:
        run(srv, target(), wait_s=5)
    assert "waited 5 s, --wait-for-server 5" in str(e.value) and "Connection refused" in str(e.value)
    assert len(srv.seen) == 6  # at 0, 1, ... 5 s: the last probe is at the bound, none after it


def test_without_a_wait_one_probe_decides_and_the_message_names_the_option():
    srv = FakeServer(DOWN)
    with pytest.raises(PreflightError) as e:
        run(srv, target())
    assert len(srv.seen) == 1 and "--wait-for-server SECONDS" in str(e.value)


def test_a_server_without_v1_models_is_trusted_when_the_model_is_named():
    assert run(FakeServer(Answer(404, None, "HTTP 404: Not Found")), target(model="x")).model == "x"


def test_the_password_of_the_url_is_never_in_a_preflight_message():
    with pytest.raises(PreflightError) as e:
        run(FakeServer(DOWN), target(), base="http://u:pw-secret-55@127.0.0.1:9/v1")
    assert "pw-secret-55" not in str(e.value) and "http://127.0.0.1:9/v1" in str(e.value)


def _scenario(**classes):
    return parse_scenario({"name": "t", "target": {"base_url": "http://127.0.0.1:9/v1"},
                           "traffic": {"classes": classes}}, "<t>")


def test_a_task_whose_prompts_exceed_max_model_len_is_refused_naming_it():
    sc = _scenario(qa={"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 100}},
                   long={"kind": "qa", "weight": 1, "prompt_tokens": {"dist": "uniform", "min": 10, "max": 5000}})
    pf = run(FakeServer(MODELS), sc.target)
    with pytest.raises(PromptTooLongError) as e:
        check_prompt_lengths(sc, pf)
    assert str(e.value).startswith("task 'long': prompts of up to 5000 tokens (traffic.classes.long.prompt_tokens) "
                                   "do not fit model 'm-a', whose max_model_len is 4096 tokens")


def test_prompts_within_max_model_len_or_an_unknown_length_pass():
    sc = _scenario(qa={"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 10, "max": 4000}},
                   off={"kind": "qa", "weight": 0, "prompt_tokens": {"dist": "fixed", "value": 99999}})
    check_prompt_lengths(sc, run(FakeServer(MODELS), sc.target))
    big = _scenario(qa={"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 99999}})
    check_prompt_lengths(big, run(FakeServer(MODELS), target(model="m-b")))  # m-b: no max_model_len given
