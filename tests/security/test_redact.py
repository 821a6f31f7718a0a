"""The redaction contract: known secret values and secret-looking patterns never survive redact()."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import yaml

from tokenswarm import redact as r

pytestmark = pytest.mark.usefixtures("fresh_redaction_registry")


def test_a_registered_value_is_masked_wherever_it_appears():
    r.remember("opaque-value-123")
    assert r.redact("gateway said: key opaque-value-123 refused") == "gateway said: key *** refused"


def test_a_percent_encoded_password_is_masked_in_both_forms():
    r.remember(*r.url_secrets("http://bob:p%40ss-word@gw:8080/v1"))
    assert "p@ss-word" not in r.redact("auth p@ss-word failed")
    assert "p%40ss-word" not in r.redact("http://gw:8080 with p%40ss-word")


def test_values_too_short_to_be_secrets_are_not_registered():
    r.remember("ab")
    assert r.redact("ab cd") == "ab cd"


@pytest.mark.parametrize("text, leaked", [
    ('{"Authorization": "Bearer sk-abcdefghijklmnop"}', "sk-abcdefghijklmnop"),
    ("authorization: Basic Ym9iOnNlY3JldA==", "Ym9iOnNlY3JldA=="),
    ("curl -H 'Authorization: Token t0ken-value'", "t0ken-value"),
    ("Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9"),
    ("cannot reach http://alice:hunter2@gw.example:8000/v1", "hunter2"),
    ("a key sk-proj-1234567890abcdef in text", "sk-proj-1234567890abcdef"),
    ("hf_abcdefghijklmnopqrstu", "hf_abcdefghijklmnopqrstu"),
    ("x-api-key: k3y-v4lue", "k3y-v4lue"),
    ('"password": "pw-12345"', "pw-12345"),
])
def test_secret_looking_patterns_are_masked_without_being_registered(text, leaked):
    out = r.redact(text)
    assert leaked not in out and "***" in out, out


@pytest.mark.parametrize("text", ["Basic statistics of the run", "Token count per chunk", "api_key_env: OPENAI_API_KEY",
                                  "http://127.0.0.1:8000/v1", "ttft_p95_ms=800", "sha256 " + "a" * 64,
                                  '{"is_secret": false, "secret": null, "password": true}', "web_login_password"])
def test_ordinary_text_is_left_alone(text):
    assert r.redact(text) == text


def test_redaction_is_idempotent():
    r.remember("secret-abc-123")
    once = r.redact("Bearer secret-abc-123 and http://u:secret-abc-123@h/; authorization: Bearer x-123456789; "
                    '"api_key": "abc-12345"')
    assert r.redact(once) == once == ('Bearer *** and http://***@h/; authorization: ***; "api_key": "***"')


def test_structures_are_redacted_recursively_keeping_their_types():
    r.remember("planted-XYZ-1")
    data = {"command": ["--set", 'target.headers={"X-Key": "planted-XYZ-1"}'], "n": 3, "none": None,
            "pair": ("planted-XYZ-1", 1.5), "planted-XYZ-1": "as a key"}
    out = r.redact(data)
    assert "planted-XYZ-1" not in repr(out)
    assert out["n"] == 3 and out["none"] is None and isinstance(out["pair"], tuple) and out["pair"][1] == 1.5


def test_bytes_are_redacted_like_text():
    r.remember("planted-bytes-1")
    assert r.redact_bytes(b'{"error":"HTTP 500: planted-bytes-1"}') == b'{"error":"HTTP 500: ***"}'


def test_a_target_registers_its_key_secret_headers_and_url_user_info(monkeypatch):
    from tokenswarm.workload.scenario import parse_scenario

    monkeypatch.setenv("I18_TEST_KEY", "env-key-0001")
    sc = parse_scenario({"name": "t", "target": {"base_url": "http://u:url-pass-0002@h:1/v1", "api_key_env": "I18_TEST_KEY",
                                                  "headers": {"X-Api-Key": "hdr-key-0003", "X-Team": "blue-team"}},
                         "traffic": {"classes": {"qa": {"weight": 1}}}}, "<t>")
    r.remember_target(sc.target)
    out = r.redact("env-key-0001 url-pass-0002 hdr-key-0003 blue-team")
    assert out == "*** *** *** blue-team"


def test_every_log_line_is_redacted_once_the_factory_is_installed(caplog):
    r.remember("logged-secret-77")
    old = logging.getLogRecordFactory()
    try:
        r.install_log_redaction()
        with caplog.at_level(logging.INFO, logger="i18"):
            logging.getLogger("i18").info("connecting with %s to %s", "logged-secret-77", "http://a:b-pass@h/")
        assert caplog.records[-1].getMessage() == "connecting with *** to http://***@h/"
    finally:
        logging.setLogRecordFactory(old)


#: Hand-written record lines and what redact_bytes must make of them (a data file: see its comments).
GATED_CASES = [(line.encode(), expected.encode())
               for line, expected in yaml.safe_load((Path(__file__).parent / "redact_bytes_cases.yaml").read_text())]


@pytest.mark.parametrize(("line", "expected"), GATED_CASES, ids=[c[0][:24].decode() for c in GATED_CASES])
def test_bytes_redaction_masks_each_secret_shape_of_a_json_line(line, expected):
    r.remember("planted-gate-1")
    assert r.redact_bytes(line) == expected


def test_bytes_redaction_skips_patterns_only_where_they_cannot_match():
    """redact_bytes runs a pattern only when its literals are present: on random byte soups of
    every literal the patterns need, it gives the bytes of the text path, which runs every pattern
    unconditionally (redact_text's documented equal), and leaves no planted or key-shaped secret."""
    import random

    r.remember("planted-gate-1")
    atoms = ["Bearer ", "bearer\t", "authorization", "Proxy-Authorization", ": ", "=", '"', "'", "http://", "u:p@",
             "@", "sk-", "hf_", "glpat-", "API_KEY", "api-key", "Access_Token", "password", "SECRET", "abcdefghij",
             "1234567890", "***", ",", ";", "}", "\n", " ", "é", "planted-gate-1", "true", "null", "/"]
    key_shape = re.compile(rb"\b(?:sk|hf|glpat)[-_][A-Za-z0-9_\-]{8,}")
    rng = random.Random(7)
    for _ in range(5000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 12)))
        out = r.redact_bytes(text.encode())
        assert out == r.redact_text(text).encode(), text
        assert b"planted-gate-1" not in out and key_shape.search(out) is None, (text, out)


def test_text_and_encoded_lines_mask_a_key_glued_to_a_non_ascii_letter_alike():
    """Word boundaries follow ASCII on both paths: 'ésk-...' is a key in a terminal line as in a record."""
    text = "clé:sk-abcdefghij12 ñBearer abcdefghij"
    assert r.redact_text(text) == "clé:*** ñBearer ***"
    assert r.redact_bytes(text.encode()) == r.redact_text(text).encode()
