"""Prompt sizing speaks each engine's /tokenize dialect, and a counter must prove itself on the probe."""

from __future__ import annotations

import pytest

from tests.helpers.procs import fake_tokenize_servers
from tokenswarm.workload.tokencount import PROBE_TEXT, EstimateCounter, ServerTokenizeCounter, make_token_counter


@pytest.fixture
def engine():
    """Fake engines' /tokenize, one token per word, that want the key "k" (tests/helpers/fake_tokenize.py):
    "llamacpp" answers a vLLM-style {"prompt"} body with {"tokens": []}, as llama.cpp's server does."""
    with fake_tokenize_servers() as start:
        yield lambda mode: start(mode, key="k")


AUTH = {"Authorization": "Bearer k"}


def test_llama_cpp_server_is_asked_with_content_after_an_empty_answer_to_the_vllm_body(engine):
    counter = make_token_counter(engine("llamacpp"), "m", None, headers=AUTH)
    assert isinstance(counter, ServerTokenizeCounter) and counter.dialect.name == "llama.cpp"
    assert any("implausible" in f for f in counter.probe_failures), counter.probe_failures
    assert counter.count("one two three four") == 4


def test_tgi_tokenize_answers_a_list_of_tokens(engine):
    counter = make_token_counter(engine("tgi"), "m", None, headers=AUTH)
    assert isinstance(counter, ServerTokenizeCounter) and counter.dialect.name == "tgi"
    assert counter.count("a b c") == 3


def test_headers_reach_every_probe_request(engine):
    counter = ServerTokenizeCounter(engine("tgi"), "m")  # no key: every dialect is refused
    assert counter.probe() is False
    assert all("HTTP 401" in f for f in counter.probe_failures) and len(counter.probe_failures) == 3


def test_a_counter_that_ignores_its_text_is_not_trusted_and_the_estimate_is_used_with_a_warning(engine, caplog):
    base = engine("constant")
    with caplog.at_level("WARNING", logger="tokenswarm.workload.tokencount"):
        counter = make_token_counter(base, "m", None, headers=AUTH)
    assert isinstance(counter, EstimateCounter)
    assert "sized with estimate" in caplog.text and "server-counted" in caplog.text


def test_the_probe_text_is_long_enough_to_judge_a_count():
    assert len(PROBE_TEXT.split()) >= 10 and PROBE_TEXT.isascii()
