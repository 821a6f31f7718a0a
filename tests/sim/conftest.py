"""Fixtures for the simulator's own tests: simulators in separate processes + a tiny SSE client."""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, field

import pytest

from tokenswarm.sim.testing import start_sim

TINY = ("--profile", "tiny-fast")


@dataclass
class SSEResult:
    """What a client saw from one request."""

    status: int
    headers: dict
    events: list[dict] = field(default_factory=list)  #: decoded data events (without [DONE])
    arrivals: list[float] = field(default_factory=list)  #: perf_counter at each event
    done: bool = False  #: saw data: [DONE]
    body: dict | None = None  #: non-streaming JSON body
    error: str | None = None  #: stream broke (e.g. connection cut)

    def content_events(self) -> list[dict]:
        """Events that carry generated text (not the role chunk or the usage-only chunk)."""
        out = []
        for ev in self.events:
            ch = ev.get("choices") or []
            if not ch:
                continue
            c = ch[0]
            text = c.get("text") if "text" in c else (c.get("delta") or {}).get("content")
            if "role" in (c.get("delta") or {}):
                continue
            if text is not None:
                out.append(ev)
        return out

    def text(self) -> str:
        if self.body is not None:
            c = self.body["choices"][0]
            return c["message"]["content"] if "message" in c else c["text"]
        parts = []
        for ev in self.content_events():
            c = ev["choices"][0]
            parts.append(c["text"] if "text" in c else c["delta"]["content"])
        return "".join(parts)

    def tokens_per_chunk(self) -> list[int]:
        """Exact tokens per content chunk from cumulative continuous usage."""
        prev, out = 0, []
        for ev in self.content_events():
            cur = ev["usage"]["completion_tokens"]
            out.append(cur - prev)
            prev = cur
        return out


def post(base_url: str, path: str, payload, timeout_s: float = 30.0, raw: bytes | None = None) -> SSEResult:
    """POST JSON; parse SSE when the answer is an event stream."""
    port = int(base_url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    body = raw if raw is not None else json.dumps(payload).encode()
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    res = SSEResult(resp.status, {k.lower(): v for k, v in resp.getheaders()})
    try:
        if res.headers.get("content-type", "").startswith("text/event-stream"):
            buf = b""
            while True:
                try:
                    data = resp.read1(65536)
                except (http.client.IncompleteRead, ConnectionError, OSError) as e:
                    res.error = type(e).__name__
                    break
                if not data:
                    break
                t = time.perf_counter()
                buf += data
                while b"\n\n" in buf:
                    line, buf = buf.split(b"\n\n", 1)
                    assert line.startswith(b"data: "), line
                    payload_bytes = line[6:]
                    if payload_bytes == b"[DONE]":
                        res.done = True
                    else:
                        res.events.append(json.loads(payload_bytes))
                        res.arrivals.append(t)
        else:
            raw_body = resp.read()
            res.body = json.loads(raw_body) if raw_body else None
    finally:
        conn.close()
    return res


def get(base_url: str, path: str) -> tuple[int, bytes]:
    port = int(base_url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    resp = conn.getresponse()
    out = resp.status, resp.read()
    conn.close()
    return out


def chat(messages, max_tokens=32, stream=True, usage=True, continuous=True, **kw) -> dict:
    """A chat payload with exact per-chunk token accounting switched on."""
    p = {"messages": messages, "max_tokens": max_tokens, "stream": stream, **kw}
    if stream and usage:
        p["stream_options"] = {"include_usage": True, "continuous_usage_stats": continuous}
    return p


@pytest.fixture(scope="module")
def sim():
    """A tiny-fast simulator without speculation, with a truth log."""
    with start_sim(*TINY, truth=True) as h:
        yield h


@pytest.fixture(scope="module")
def sim_draft():
    """A tiny-fast simulator with draft-model speculation (K=4)."""
    with start_sim(*TINY, "--spec-method", "draft", "--num-speculative-tokens", "4", truth=True) as h:
        yield h
