"""The run's Prometheus scrapers: the target's ``/metrics`` and any extra endpoints.

Each scraper takes a baseline sample before any load, then scrapes on the target's interval
into the run's metrics log, tagging each sample with the step running at the time.
"""

from __future__ import annotations

from typing import IO, Callable

from tokenswarm.collect.scrape import Scraper
from tokenswarm.wire.auth import target_headers, url_headers
from tokenswarm.workload.scenario import TargetConfig


def start_scrapers(target: TargetConfig, base_url: str, open_log: Callable[[], IO[bytes]],
                   step: Callable[[], int | None]) -> list[Scraper]:
    """Start one scraper per endpoint (none, and no log opened, when the target names none)."""
    endpoints = []
    url = target.metrics_endpoint(base_url)
    if url:
        endpoints.append(("target", url))
    endpoints.extend(target.extra_metrics)
    if not endpoints:
        return []
    fh = open_log()
    scrapers = []
    for source, u in endpoints:
        # the target's /metrics carries the target's auth; an extra endpoint only its own URL's
        u, headers = (url_headers(u)[0], target_headers(target, base_url)) if source == "target" else url_headers(u)
        s = Scraper(source, u, target.scrape_interval_s, fh, step=step, headers=headers, verify_tls=target.verify_tls)
        s.scrape_once()  # a baseline sample before any load
        s.start()
        scrapers.append(s)
    return scrapers
