"""A pilot before the first request: how fast does this server stream one answer?

The plan of a run (:mod:`tokenswarm.orchestrate.sizing`) needs a throughput to say how many
requests each cell will get. A simulator's model cannot be assumed for a real server, so the
run measures it: one streamed request of :data:`PILOT_OUTPUT_TOKENS` tokens (temperature 0,
``ignore_eos`` so the length is the one asked for), timed from the send to the first content
and from the first content to the end. Its answer is not a record of the run (it is not part
of the load plan; it is sent before the server metrics' baseline scrape, so it is not in the
run's counter deltas either) and the plan's first line says it was sent. A pilot that fails,
or is silent for ``timeout_s``, leaves the plan on its stated assumptions; it never stops the
run. ``--no-pilot`` skips it (a test that counts every request the server saw). The HTTP call
is injected for tests.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

from tokenswarm.load.context import endpoint_path
from tokenswarm.wire.auth import split_userinfo, target_headers

PILOT_OUTPUT_TOKENS = 32
PILOT_PROMPT = "Count from one to one hundred in words, separated by commas."


@dataclass(frozen=True)
class PilotResult:
    """One streamed answer, timed."""

    output_tokens: int
    ttft_s: float  #: send to the first content
    decode_s: float  #: first content to the end of the stream

    @property
    def stream_tokens_per_s(self) -> float | None:
        """Decode speed of one stream (tokens after the first, over the time after it)."""
        if self.output_tokens < 2 or self.decode_s <= 0:
            return None
        return (self.output_tokens - 1) / self.decode_s


def _stream_lines(url: str, body: bytes, headers: dict[str, str], timeout_s: float,
                  verify_tls: bool) -> Iterator[bytes]:
    context = ssl._create_unverified_context() if url.startswith("https") and not verify_tls else None
    req = urllib.request.Request(url, data=body, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout_s, context=context) as resp:
        yield from resp


def run_pilot(base_url: str, target: Any, model: str, api: str, *, timeout_s: float = 10.0,
              lines: Callable[..., Iterator[bytes]] = _stream_lines,
              clock: Callable[[], float] = time.perf_counter) -> PilotResult:
    """Send the pilot request; raises ``OSError``/``ValueError`` when there is no usable answer."""
    root = split_userinfo(base_url)[0].rstrip("/")
    parts = urlsplit(root)
    url = urlunsplit((parts.scheme, parts.netloc, endpoint_path(root, api), "", ""))
    body: dict[str, Any] = {"model": model, "max_tokens": PILOT_OUTPUT_TOKENS, "stream": True,
                            "stream_options": {"include_usage": True}, "temperature": 0.0, "ignore_eos": True}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": PILOT_PROMPT}]
    else:
        body["prompt"] = PILOT_PROMPT
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
               **target_headers(target, base_url)}
    sent = clock()
    first: float | None = None
    chunks = 0
    usage_tokens: int | None = None
    for raw in lines(url, json.dumps(body).encode(), headers, timeout_s, getattr(target, "verify_tls", True)):
        line = raw.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        event = json.loads(line[5:])
        usage = event.get("usage") or {}
        if usage.get("completion_tokens") is not None:
            usage_tokens = int(usage["completion_tokens"])
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content") or choice.get("text")
            if text:
                chunks += 1
                if first is None:
                    first = clock()
    end = clock()
    if first is None:
        raise ValueError("the pilot request streamed no content")
    return PilotResult(usage_tokens if usage_tokens is not None else chunks, first - sent, end - first)
