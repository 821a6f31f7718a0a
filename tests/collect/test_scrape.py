"""The /metrics scraper: one malformed line of an exposition is skipped and counted, the rest kept."""

from __future__ import annotations

import io

import orjson

from tokenswarm.collect import scrape
from tokenswarm.collect.scrape import Scraper, parse_metrics_lenient

GOOD = """# HELP vllm:num_requests_running Running requests.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{model_name="m"} 1234.0
vllm:generation_tokens_created{model_name="m"} 1.7e9
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 5.0
vllm:e2e_request_latency_seconds_count{model_name="m"} 5.0
vllm:e2e_request_latency_seconds_sum{model_name="m"} 7.5
"""
BAD_LINE = 'vllm:broken{model_name="m" 12 oops'


def test_a_well_formed_exposition_gives_every_sample_but_created():
    samples, bad = parse_metrics_lenient(GOOD)
    assert bad == [] and len(samples) == 6
    assert {"name": "vllm:num_requests_running", "labels": {"model_name": "m"}, "value": 3.0} in samples


def test_one_malformed_line_is_skipped_and_counted_and_every_other_sample_kept():
    text = GOOD.replace("# TYPE vllm:generation_tokens counter", BAD_LINE + "\n# TYPE vllm:generation_tokens counter")
    samples, bad = parse_metrics_lenient(text)
    assert bad == [BAD_LINE]
    assert samples == parse_metrics_lenient(GOOD)[0]  # same names, labels and values, histogram included


def test_a_scrape_with_a_malformed_line_is_not_an_error_and_says_how_many_were_skipped(monkeypatch):
    monkeypatch.setattr(scrape, "fetch", lambda *a, **k: GOOD + BAD_LINE + "\n" + BAD_LINE + "x\n")
    out = io.BytesIO()
    s = Scraper("target", "http://127.0.0.1:9/metrics", 5.0, out, step=lambda: 0)
    s.scrape_once()
    line = orjson.loads(out.getvalue())
    assert line["error"] is None and line["malformed_lines"] == 2 and len(line["samples"]) == 6
    assert s.scrapes == 1 and s.failures == 0 and s.malformed_lines == 2
