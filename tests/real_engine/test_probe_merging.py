"""The vLLM probe asks again when the API server merged engine steps into one chunk.

On a saturated machine vLLM's API server falls behind its engine and sends several steps'
tokens in one chunk; the chunk sizes then say nothing about speculation. A plain server's step
makes one token, an n-gram server's at most its K drafts plus one, so a larger chunk is proof of
merging and the probe asks again (tests/real_engine/vllm_runs.py). No engine runs here: the
answers are scripted.
"""

from __future__ import annotations

import pytest

from tests.real_engine import vllm_runs
from tests.real_engine.vllm_runs import PROBE_ATTEMPTS, SPEC_K, probe, steps_merged


def test_a_plain_server_merged_when_most_chunks_hold_more_than_one_token():
    assert not steps_merged([1] * 20 + [3, 5], speculative=False)
    assert steps_merged([1] * 5 + [2] * 10, speculative=False)


def test_a_speculative_server_merged_when_a_chunk_holds_more_than_one_verify_step():
    one_step = SPEC_K + 1
    assert not steps_merged([1] * 10 + [one_step] * 4 + [2], speculative=True), "drafts accepted: not merged"
    assert steps_merged([1] * 10 + [one_step, one_step, 60, 2], speculative=True), "CI76's answer"
    assert not steps_merged([], speculative=True) and not steps_merged([], speculative=False)


@pytest.fixture
def scripted(monkeypatch):
    """Answers the probe gets in turn (token ids, chunk sizes); counts the requests."""
    answers: list[list[int]] = []
    asked: list[int] = []

    def stream(_url, _prompt, _max_tokens):
        asked.append(1)
        chunks = answers[len(asked) - 1]
        return list(range(sum(chunks))), chunks

    monkeypatch.setattr(vllm_runs, "stream_chat_token_ids", stream)
    monkeypatch.setattr(vllm_runs, "metric_total", lambda _url, _name: float(len(asked)))
    return answers, asked


def test_a_merged_speculative_answer_is_asked_again_and_the_unmerged_one_kept(scripted):
    answers, asked = scripted
    merged, clean = [1] * 10 + [SPEC_K + 1] * 2 + [60], [1] * 10 + [SPEC_K + 1] * 16
    answers += [merged, clean, clean]
    got = probe("http://127.0.0.1:1", speculative=True)
    assert len(asked) == 2, "asked again once, then the answer was clean"
    assert got["chunk_tokens"] == clean
    assert (got["accepted_before"], got["accepted_after"]) == (1.0, 2.0), "the counters around the kept answer"


def test_when_every_answer_is_merged_the_most_finely_chunked_is_kept(scripted):
    answers, asked = scripted
    answers += [[1, 60], [1, 1, 1, 30], [1, 40]]
    got = probe("http://127.0.0.1:1", speculative=True)
    assert len(asked) == PROBE_ATTEMPTS
    assert got["chunk_tokens"] == [1, 1, 1, 30]


def test_a_plain_answer_of_single_tokens_is_taken_at_once(scripted):
    answers, asked = scripted
    answers += [[1] * 40]
    assert probe("http://127.0.0.1:1", speculative=False)["chunk_tokens"] == [1] * 40 and len(asked) == 1
