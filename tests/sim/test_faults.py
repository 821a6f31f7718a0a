"""Every fault flag is observable by a client, in /metrics and in the truth log."""

import http.client
import json

import pytest

from tests.helpers.waiting import wait_until
from tokenswarm.sim.samples import chat_messages
from tokenswarm.sim.testing import start_sim

from .conftest import TINY, chat, post


@pytest.mark.parametrize("status", [500, 503, 429])
def test_an_http_error_fault_answers_its_status_counts_it_and_logs_it_as_an_error(status):
    with start_sim(*TINY, f"--fault-http-{status}", "1.0", truth=True) as s:
        r = post(s.base_url, "/v1/chat/completions", chat(chat_messages("qa"), max_tokens=5))
        assert r.status == status and r.body["error"]["code"] == status
        kinds = s.metrics()
        assert kinds[("tokenswarm_sim:faults_total", (("engine", "0"), ("kind", f"http_{status}"),
                                                      ("model_name", "sim-tiny")))] == 1
        s.stop()
        truth = s.read_truth()
        assert [(t["status"], t["outcome"]) for t in truth] == [(status, "error")]


def test_fault_decisions_are_deterministic_given_the_seed():
    def statuses(seed):
        with start_sim(*TINY, "--fault-http-500", "0.5", "--seed", str(seed)) as s:
            return [post(s.base_url, "/v1/completions", {"prompt": "x", "max_tokens": 1}).status for _ in range(16)]

    a = statuses(7)
    assert a == statuses(7) and {200, 500} == set(a) and a != statuses(8)


def test_a_cut_fault_ends_the_stream_unfinished_and_logs_the_chunks_it_sent():
    with start_sim(*TINY, "--fault-cut", "1.0", truth=True) as s:
        r = post(s.base_url, "/v1/chat/completions", chat(chat_messages("qa"), max_tokens=50, ignore_eos=True))
        assert r.status == 200 and not r.done and r.error is not None
        assert 1 <= len(r.content_events()) <= 4
        assert all(e["choices"][0]["finish_reason"] is None for e in r.content_events())
        s.stop()
        (t,) = s.read_truth()
        assert t["outcome"] == "fault_cut" and len(t["chunks"]) == len(r.content_events())


def test_a_stall_fault_holds_one_gap_for_the_stall_and_still_delivers_every_token():
    with start_sim(*TINY, "--fault-stall", "1.0", "--stall-seconds", "0.6", truth=True) as s:
        r = post(s.base_url, "/v1/chat/completions", chat(chat_messages("qa"), max_tokens=30, ignore_eos=True))
        assert r.done and sum(r.tokens_per_chunk()) == 30
        gaps = [b - a for a, b in zip(r.arrivals, r.arrivals[1:])]
        assert max(gaps) >= 0.55 and sorted(gaps)[len(gaps) // 2] < 0.05
        s.stop()
        (t,) = s.read_truth()
        assert t["outcome"] == "fault_stall"


def _spec_metrics(s) -> dict:
    m = s.metrics()
    return {name: v for (name, labels), v in m.items() if name.startswith(("tokenswarm_sim:draft", "vllm:spec"))
            and "position" not in dict(labels)}


def test_draft_model_outage_falls_back_to_plain_decoding():
    with start_sim(*TINY, "--spec-method", "draft", "--fault-draft-unavailable", "1.0") as s:
        r = post(s.base_url, "/v1/chat/completions", chat(chat_messages("code"), max_tokens=40, ignore_eos=True))
        assert r.tokens_per_chunk() == [1] * 40
        m = _spec_metrics(s)
        assert m["tokenswarm_sim:draft_available"] == 0.0
        assert m["tokenswarm_sim:draft_fallback_steps_total"] >= 39
        assert m["vllm:spec_decode_num_drafts_total"] == 0


def test_slow_draft_model_slows_speculative_decoding():
    def duration(*flags):
        with start_sim(*TINY, "--spec-method", "draft", *flags) as s:
            r = post(s.base_url, "/v1/chat/completions", chat(chat_messages("qa"), max_tokens=80, ignore_eos=True))
            return r.arrivals[-1] - r.arrivals[0]

    normal = duration()
    slow = duration("--fault-draft-slow", "1.0", "--draft-slow-factor", "40")
    assert slow > 1.5 * normal


def test_client_disconnect_is_recorded_as_aborted():
    with start_sim(*TINY, truth=True) as s:
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=5)
        body = json.dumps(chat(chat_messages("qa"), max_tokens=3000, ignore_eos=True)).encode()
        conn.request("POST", "/v1/chat/completions", body=body)
        resp = conn.getresponse()
        resp.read1(100)
        conn.close()
        truth = wait_until(s.read_truth, 5, "the aborted request in the truth log")
        assert truth and truth[0]["outcome"] == "aborted" and truth[0]["output_tokens"] < 3000
        m = s.metrics()
        assert m[("vllm:num_requests_running", (("engine", "0"), ("model_name", "sim-tiny")))] == 0
