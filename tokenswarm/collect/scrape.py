"""Scrape Prometheus ``/metrics`` endpoints into ``server_metrics.jsonl`` (master only).

Parsing uses prometheus_client's text parser. ``_created`` series are dropped (they are
timestamps, not counters). Each line is one scrape of one endpoint, tagged with the load
step current at scrape time; see the README. A malformed line in an exposition (the parser
refuses the whole text for one) is skipped and counted (``malformed_lines`` on that scrape's
line), never the whole scrape.
"""

from __future__ import annotations

import logging
import ssl
import time
import urllib.error
import urllib.request
from typing import IO, Any, Callable

import gevent
import orjson

from tokenswarm.redact import redact_bytes

log = logging.getLogger("tokenswarm")


def _metric_families() -> Callable[[str], Any]:
    """prometheus-client's text parser, imported on first use: a run without a metrics URL
    never pays its import (~25 ms of start-up). :class:`Scraper` imports it when created, so the
    first scrape does not stall the event loop with an import."""
    from prometheus_client.parser import text_string_to_metric_families  # see above: on first use

    return text_string_to_metric_families


def _samples(text: str, out: list[dict[str, Any]]) -> None:
    for family in _metric_families()(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out.append({"name": s.name, "labels": dict(s.labels), "value": float(s.value)})


def parse_metrics_lenient(text: str) -> tuple[list[dict[str, Any]], list[str]]:
    """``(samples, malformed lines)`` of a Prometheus text exposition.

    The whole text in one parse when it is well formed (the common case); else line by line,
    each sample line with the ``# TYPE`` line of its family, so that one bad line costs only
    itself. A sample's name, labels and value are the same either way.
    """
    out: list[dict[str, Any]] = []
    try:
        _samples(text, out)
        return out, []
    except Exception:  # the parser raises ValueError, and others on odd input: fall back
        out = []
    bad: list[str] = []
    type_line = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if stripped.startswith("# TYPE "):
                type_line = stripped + "\n"
            continue
        try:
            _samples(type_line + line + "\n", out)
        except Exception:
            try:  # a sample outside its family's TYPE (e.g. an untyped line after a histogram)
                _samples(line + "\n", out)
            except Exception:
                bad.append(line)
    return out, bad


def parse_metrics(text: str) -> list[dict[str, Any]]:
    """Samples of a Prometheus text exposition as ``{"name", "labels", "value"}`` dicts
    (malformed lines skipped: :func:`parse_metrics_lenient` counts them)."""
    return parse_metrics_lenient(text)[0]


def fetch(url: str, timeout_s: float = 5.0, headers: dict[str, str] | None = None, verify_tls: bool = True) -> str:
    req = urllib.request.Request(url, headers=headers or {})
    context = None
    if url.startswith("https") and not verify_tls:
        context = ssl._create_unverified_context()  # the scenario said verify_tls: false
    with urllib.request.urlopen(req, timeout=timeout_s, context=context) as resp:
        body: bytes = resp.read()
    return body.decode("utf-8", "replace")


class Scraper:
    """Scrapes ``url`` every ``interval_s`` into ``out`` until stopped."""

    def __init__(self, source: str, url: str, interval_s: float, out: IO[bytes],
                 step: Callable[[], int | None], headers: dict[str, str] | None = None,
                 verify_tls: bool = True) -> None:
        self.verify_tls = verify_tls
        self.source, self.url, self.interval_s, self.out = source, url, interval_s, out
        self.step = step
        self.headers = headers
        self.scrapes = 0
        self.failures = 0
        self.malformed_lines = 0  # skipped over all scrapes (each scrape's line has its own count)
        self._warned_malformed = False
        self._greenlet: gevent.Greenlet | None = None
        self._warned = False
        self.last: dict[str, Any] | None = None  # the latest successful scrape (live UI charts)
        _metric_families()  # imported now, before the load: not inside the first scrape

    def scrape_once(self) -> dict[str, Any]:
        line: dict[str, Any] = {"scraped_at": round(time.time(), 6), "source": self.source, "url": self.url,
                                "step": self.step(), "error": None, "samples": []}
        try:
            samples, bad = parse_metrics_lenient(
                fetch(self.url, min(5.0, self.interval_s * 2), self.headers, self.verify_tls))
            line["samples"] = samples
            if bad:
                line["malformed_lines"] = len(bad)
                self.malformed_lines += len(bad)
                if not self._warned_malformed:
                    self._warned_malformed = True
                    log.warning("tokenswarm: %s metrics at %s: skipped %d malformed line(s), e.g. %r",
                                self.source, self.url, len(bad), bad[0][:120])
            self.scrapes += 1
            self.last = line
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.failures += 1
            line["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
            if not self._warned:
                self._warned = True
                log.warning("tokenswarm: cannot scrape %s metrics at %s (%s); will keep trying",
                            self.source, self.url, line["error"])
        self.out.write(redact_bytes(orjson.dumps(line)) + b"\n")
        self.out.flush()
        return line

    def _loop(self) -> None:
        next_t = time.monotonic()
        while True:
            self.scrape_once()
            next_t += self.interval_s
            gevent.sleep(max(0.0, next_t - time.monotonic()))

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._loop)

    def stop(self, final_scrape: bool = True) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=True)
            self._greenlet = None
            if final_scrape:
                self.scrape_once()  # the counters' final values close the last step's window
