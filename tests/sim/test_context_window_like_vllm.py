"""The simulator's context-window rules match what a real vLLM 0.32 did (docs/vllm-observations.md):
a prompt over the window and ``max_tokens`` over the window are 400s, but a prompt plus
``max_tokens`` over the window is served, stopping at the limit with finish_reason "length"."""

import pytest

from tokenswarm.sim.api import HttpError, parse_completion
from tokenswarm.sim.tokenizer import tokenize

WINDOW = 64


def parse(prompt: str, **fields):
    return parse_completion({"prompt": prompt, **fields}, "completions", "m", WINDOW)


def test_prompt_plus_max_tokens_over_the_window_is_capped_at_the_window_not_refused():
    prompt = "one two three four five six seven eight"
    plen = len(tokenize(prompt))
    req = parse(prompt, max_tokens=WINDOW - 1)
    assert req.prompt_len == plen and req.max_tokens == WINDOW - plen and req.max_tokens_given
    assert parse(prompt, max_tokens=5).max_tokens == 5  # within the window: untouched
    assert parse(prompt).max_tokens == WINDOW - plen  # not given: the rest of the window


def test_max_tokens_over_the_window_is_refused_with_vllms_message():
    with pytest.raises(HttpError) as err:
        parse("hi", max_tokens=WINDOW + 1)
    assert err.value.status == 400 and err.value.param == "max_tokens"
    assert err.value.message.startswith(f"max_tokens={WINDOW + 1} cannot be greater than max_model_len={WINDOW}")


def test_a_prompt_over_the_window_is_still_refused():
    with pytest.raises(HttpError) as err:
        parse("word " * (2 * WINDOW), max_tokens=1)
    assert err.value.status == 400 and f"maximum context length is {WINDOW} tokens" in err.value.message
