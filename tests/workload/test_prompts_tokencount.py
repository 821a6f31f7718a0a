"""Token counters: server /tokenize (probed once, falls back), local tokenizer.json, estimate."""

import json
import random
import sys
import time
import urllib.request

import pytest

from tests.helpers.procs import fake_tokenize_servers
from tokenswarm.workload.prompts import PromptSource
from tokenswarm.workload.scenario import parse_scenario
from tokenswarm.workload.tokencount import (
    EstimateCounter,
    LocalTokenizerCounter,
    ServerTokenizeCounter,
    TokenizerUnavailable,
    make_token_counter,
    tokenize_url,
)


@pytest.fixture
def fake_server():
    """Fake vLLM-style /tokenize servers ("vllm": one token per word; "none": no /tokenize)."""
    with fake_tokenize_servers() as start:
        yield start


def server_calls(base):
    with urllib.request.urlopen(base + "/stats", timeout=5) as r:
        return json.loads(r.read())["tokenize_calls"]


def test_tokenize_url_is_at_the_server_root():
    assert tokenize_url("http://h:8000/v1/") == "http://h:8000/tokenize"
    assert tokenize_url("http://h:8000") == "http://h:8000/tokenize"


def test_the_estimate_counts_a_token_per_four_characters_rounded_up():
    c = EstimateCounter()
    assert c.count("") == 0 and c.count("abcd") == 1 and c.count("abcde") == 2
    with pytest.raises(ValueError):
        EstimateCounter(0)


def test_server_tokenize_is_used_when_available(fake_server):
    base = fake_server("vllm")
    counter = make_token_counter(base + "/v1", "m", None)
    assert isinstance(counter, ServerTokenizeCounter) and counter.name == f"server:{base}/tokenize"
    assert counter.count("one two three") == 3


def test_prompts_sized_by_server_counts_with_bounded_calls(fake_server):
    base = fake_server("vllm")
    counter = make_token_counter(base, "m", None)
    t = parse_scenario({"traffic": {"classes": {"summarization": {}}}}).traffic.classes[0]
    source = PromptSource(t, counter, seed=1, pool_size=12)
    after_init = server_calls(base)
    assert after_init == 1 + 12  # the probe, then one call per calibration sample
    # words are ~6 chars each here, far from 4 chars/token: calibration must find that
    assert 5.0 < source.chars_per_token < 8.0
    rng = random.Random(1)
    ratios = []
    for _ in range(20):
        p = source.next_prompt(rng)
        ratios.append(len(p.messages[0]["content"].split()) / p.target_prompt_tokens)
    assert server_calls(base) == after_init  # nothing per request
    ratios.sort()
    assert abs(ratios[len(ratios) // 2] - 1) < 0.1


def test_missing_tokenize_falls_back_to_estimate(fake_server, caplog):
    base = fake_server("none")
    with caplog.at_level("INFO", logger="tokenswarm.workload.tokencount"):
        counter = make_token_counter(base, "m", None)
    assert isinstance(counter, EstimateCounter)
    assert "no usable /tokenize" in caplog.text


def test_unreachable_server_falls_back_quickly():
    t0 = time.monotonic()
    counter = make_token_counter("http://127.0.0.1:9", "m", None, timeout_s=2)
    assert isinstance(counter, EstimateCounter)
    assert time.monotonic() - t0 < 5


def test_server_failure_after_probe_uses_fallback_and_warns_once(caplog):
    counter = ServerTokenizeCounter("http://127.0.0.1:9", "m", timeout_s=1)
    with caplog.at_level("WARNING"):
        assert counter.count("abcdefgh") == 2
        assert counter.count("abcd") == 1
    assert caplog.text.count("failed") == 1


def make_tokenizer_json(path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "world": 2, ",": 3}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    return str(path)


def test_a_local_tokenizer_json_counts_with_its_own_vocabulary(tmp_path):
    path = make_tokenizer_json(tmp_path / "tokenizer.json")
    counter = make_token_counter(None, None, path)
    assert isinstance(counter, LocalTokenizerCounter)
    assert counter.count("hello, world unknownword") == 4


def test_local_tokenizer_is_second_choice_after_server(fake_server, tmp_path):
    path = make_tokenizer_json(tmp_path / "tokenizer.json")
    assert isinstance(make_token_counter(fake_server("vllm"), "m", path), ServerTokenizeCounter)
    assert isinstance(make_token_counter(fake_server("none"), "m", path), LocalTokenizerCounter)


def test_named_tokenizer_without_package_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import now raises ImportError
    path = tmp_path / "tokenizer.json"
    path.write_text("{}")
    with pytest.raises(TokenizerUnavailable) as info:
        make_token_counter(None, None, str(path))
    assert "pip install tokenizers" in str(info.value)


def test_an_unparsable_tokenizer_json_is_refused_as_not_valid(tmp_path):
    pytest.importorskip("tokenizers")
    path = tmp_path / "tokenizer.json"
    path.write_text("{not json")
    with pytest.raises(TokenizerUnavailable) as info:
        LocalTokenizerCounter(str(path))
    assert "not a valid tokenizer.json" in str(info.value)
