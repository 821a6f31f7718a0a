"""Process lifecycle and load: clean SIGTERM, complete truth log, visible queueing."""

import threading
import time

from tests.helpers.waiting import wait_until
from tokenswarm.sim.samples import chat_messages
from tokenswarm.sim.testing import start_sim

from .conftest import chat, get, post


def metric_total(sim, name: str) -> float:
    """A metric of the simulator's /metrics summed over its label sets."""
    return sum(v for (sample, _), v in sim.metrics().items() if sample == name)


def test_sigterm_stops_cleanly_and_the_truth_log_is_complete(tmp_path):
    with start_sim("--profile", "tiny-fast", truth=True) as s:
        done = [post(s.base_url, "/v1/completions", {"prompt": "hello", "max_tokens": 3}) for _ in range(5)]
        results = []
        t = threading.Thread(target=lambda: results.append(
            post(s.base_url, "/v1/chat/completions", chat(chat_messages("qa"), max_tokens=4000, ignore_eos=True))))
        t.start()
        # the long answer is streaming: 5 x 3 tokens of the short ones, then > 100 of its own
        wait_until(lambda: metric_total(s, "vllm:generation_tokens_total") > 5 * 3 + 100, 20,
                   "the long answer's first hundred tokens")
        assert s.stop() == 0
        t.join(10)
        truth = s.read_truth()
    assert len(truth) == 6
    assert {r.body["id"] for r in done} <= {x["id"] for x in truth}
    assert [x["outcome"] for x in truth if x["output_tokens"] > 100] == ["aborted"]
    assert results and not results[0].done


def test_excess_requests_wait_and_show_in_metrics_and_ttft(tmp_path):
    prof = tmp_path / "two-seqs.yaml"
    prof.write_text("name: two-seqs\nmodel_name: m\nmax_num_seqs: 2\nmax_model_len: 4096\n"
                    "kv_capacity_tokens: 100000\noverhead_s: 0.0\nweights_read_s: 0.005\n"
                    "kv_read_s_per_token: 0.0\nflops_per_token_s: 0.0\nprefill_tokens_per_s: 1.0e+9\n")
    with start_sim("--profile", str(prof)) as s:
        results = {}

        def one(i):
            results[i] = post(s.base_url, "/v1/chat/completions",
                              chat(chat_messages("qa", i), max_tokens=40, ignore_eos=True))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
        t0 = time.perf_counter()
        for th in threads:
            th.start()
        labels = (("engine", "0"), ("model_name", "m"))
        seen = []  # (running, waiting) at every scrape

        def full_batch_with_the_rest_waiting():
            m = s.metrics()
            seen.append((m[("vllm:num_requests_running", labels)], m[("vllm:num_requests_waiting", labels)]))
            running, waiting = seen[-1]
            return running == 2 and waiting >= 3

        # All six at once: two running, four waiting. On a busy machine the threads' requests can
        # arrive spread out and the engine start the first alone (1 running, 5 waiting, then 2
        # and 3): either way max_num_seqs caps the batch at two and the excess shows as waiting.
        wait_until(full_batch_with_the_rest_waiting, 10, "two requests running and at least three waiting",
                   every_s=0.01)
        for th in threads:
            th.join(20)
        assert max(running for running, _ in seen) == 2, seen
        ttfts = sorted(r.arrivals[0] - t0 for r in results.values())
        # two waves of ~0.2 s each: the last pair waits for two earlier pairs
        assert ttfts[-1] > ttfts[0] + 0.3
        assert get(s.base_url, "/health")[0] == 200
