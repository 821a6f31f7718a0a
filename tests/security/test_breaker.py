"""The circuit breaker stops a run whose requests all fail the same way, and only such a run."""

from __future__ import annotations

from tokenswarm.load.breaker import THRESHOLD, CircuitBreaker


def test_the_threshold_is_twenty_identical_failures():
    assert THRESHOLD == 20


def test_it_trips_on_the_threshold_th_identical_failure_with_the_servers_message():
    b = CircuitBreaker(5)
    results = [b.observe("http_error", 404, "HTTP 404: NotFoundError: The model `x` does not exist.") for _ in range(5)]
    assert results[:4] == [None] * 4
    assert "the first 5 requests all failed the same way (http_error 404)" in results[4]
    assert "The model `x` does not exist." in results[4] and "threshold: 5" in results[4]


def test_it_trips_only_once():
    b = CircuitBreaker(2)
    assert [b.observe("timeout", None, "ttft") is not None for _ in range(4)] == [False, True, False, False]


def test_one_success_disarms_it_for_the_rest_of_the_run():
    b = CircuitBreaker(3)
    b.observe("ok", 200, None)
    assert all(b.observe("http_error", 500, "boom") is None for _ in range(50)) and b.tripped is None


def test_failures_of_different_kinds_start_the_count_again():
    b = CircuitBreaker(3)
    seq = [("http_error", 500), ("http_error", 500), ("http_error", 503), ("http_error", 503), ("http_error", 503)]
    assert [b.observe(o, s, "e") is not None for o, s in seq] == [False, False, False, False, True]


def test_cancelled_requests_are_not_failures():
    b = CircuitBreaker(2)
    assert all(b.observe("cancelled", None, None) is None for _ in range(10)) and b.armed


def test_a_secret_in_the_servers_message_is_masked():
    b = CircuitBreaker(1)
    assert "sk-abcdefghijkl" not in b.observe("http_error", 500, "echo: Authorization: Bearer sk-abcdefghijkl")
