"""The C test of which secret patterns may match a record line gives the Python tests' answers."""

from __future__ import annotations

import random

import pytest

from tokenswarm import redact

_fastread = pytest.importorskip("tokenswarm.wire._fastread")

CASES = [
    b"",
    b'{"run_id":"r","chunk_offsets_ms":[1.0,2.0],"request_key":"ab"}',
    b'{"error":"401: Authorization: Basic dXNlcjpwYXNz"}',
    b'{"error":"bad header bearer abcdefghijklmnop"}',
    b'{"url":"http://user:pw@host/x"}',
    b'{"url":"http://host/x"} mail@host',
    b'{"note":"key sk-abcdefghijkl"}',
    b'{"note":"hf_abcdefghijkl and GLPAT-x"}',
    b'{"note":"glpat-abcdefghijkl"}',
    b'{"note":"gsk_abcdefghijkl"}',
    b'{"note":"xai-abcdefghijkl ghp_abc gho-abc"}',
    b'{"note":"s\xc3\xa9k-\x00_ API-KEY=1"}',
    b'{"Password": "x", "ACCESS_TOKEN": "y", "secret": 1, "ApiKey": 2, "accessToken": 3}',
    b"s k-",  # bytes deleted between letters join them (a false positive: the pattern then runs)
]


def _random_lines(n: int) -> list[bytes]:
    rnd = random.Random(31)
    alphabet = b"skprhfgxaiotlbeKSAP-_:/@ \"{}=.\x00\xff"
    return [bytes(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40))) for _ in range(n)]


@pytest.mark.parametrize("data", CASES)
def test_the_native_gates_say_what_the_python_gates_say(data):
    assert _fastread.redact_gates(data) == redact._gate_mask(data)


def test_the_native_gates_agree_on_random_lines_of_the_letters_the_patterns_need():
    lines = _random_lines(20000)
    assert [_fastread.redact_gates(x) for x in lines] == [redact._gate_mask(x) for x in lines]
    assert {_fastread.redact_gates(x) for x in lines} >= {0, 4, 8}  # the lines do exercise gates


def test_redaction_masks_the_same_with_either_gate(monkeypatch):
    lines = CASES + _random_lines(2000)
    monkeypatch.setattr(redact, "_gate_mask_fn", redact._gate_mask)
    python = [redact.redact_bytes(x) for x in lines]
    monkeypatch.setattr(redact, "_gate_mask_fn", _fastread.redact_gates)
    assert [redact.redact_bytes(x) for x in lines] == python
    assert redact.redact_bytes(b'"key": "sk-abcdefghijkl"').count(b"***") == 1
