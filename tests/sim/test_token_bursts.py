"""``tokens_per_step``: a step's tokens leave as one-token SSE events, written together."""

import pytest

from tokenswarm.sim.profiles import ProfileError, load_profile
from tokenswarm.sim.samples import chat_messages
from tokenswarm.sim.testing import start_sim

from .conftest import chat, post

BURST = """name: burst-test
batching: independent
tokens_per_step: 4
weights_read_s: 0.02
kv_read_s_per_token: 0.0
flops_per_token_s: 0.0
overhead_s: 0.0
prefill_tokens_per_s: 1.0e+9
"""


@pytest.fixture(scope="module")
def burst_sim(tmp_path_factory):
    path = tmp_path_factory.mktemp("profiles") / "burst.yaml"
    path.write_text(BURST)
    with start_sim("--profile", str(path), truth=True) as h:
        yield h


def test_each_token_is_its_own_event_and_a_steps_events_share_one_write(burst_sim):
    r = post(burst_sim.base_url, "/v1/chat/completions",
             chat(chat_messages("qa", 1), max_tokens=10, ignore_eos=True))
    assert r.status == 200 and r.done
    assert r.tokens_per_chunk() == [1] * 10  # usage counts up one by one, event by event
    truth = {t["id"]: t for t in burst_sim.read_truth()}[r.events[0]["id"]]
    assert [n for _, n in truth["chunks"]] == [1] * 10 and truth["output_tokens"] == 10
    # the first token comes with the prefill step; then steps of 4, 4 and the last 1
    write_times = sorted({ts for ts, _ in truth["chunks"]})
    assert [sum(1 for ts, _ in truth["chunks"] if ts == w) for w in write_times] == [1, 4, 4, 1]
    assert r.content_events()[-1]["choices"][0]["finish_reason"] == "length"


def test_burst_text_is_the_same_text_a_one_token_server_sends(burst_sim):
    with start_sim("--profile", "tiny-fast") as plain:
        one = post(plain.base_url, "/v1/chat/completions",
                   chat(chat_messages("code", 3), max_tokens=12, ignore_eos=True, temperature=0))
    burst = post(burst_sim.base_url, "/v1/chat/completions",
                 chat(chat_messages("code", 3), max_tokens=12, ignore_eos=True, temperature=0))
    assert burst.text() == one.text()


def test_tokens_per_step_needs_independent_batching(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nbatching: continuous\ntokens_per_step: 4\n")
    with pytest.raises(ProfileError) as ei:
        load_profile(str(path))
    assert str(path) in str(ei.value) and "'tokens_per_step'" in str(ei.value)


def test_bench_burst_profile_ships_with_32_token_steps():
    p = load_profile("bench-burst")
    assert p.tokens_per_step == 32 and p.batching == "independent"
