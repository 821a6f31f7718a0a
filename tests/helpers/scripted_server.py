"""A deliberately misbehaving OpenAI-style SSE server for client tests.

Run as ``python scripted_server.py PORT``. The request path picks the behaviour:
``POST /<script>/v1/chat/completions?gap_ms=10&n=5``. Every script streams chat chunks
(or errors) the way a real or broken server would; see ``SCRIPTS``.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from urllib.parse import parse_qs, urlsplit

import gevent
from gevent.server import StreamServer


def chunk(i: int, text: str, cum: int | None, finish: str | None = None) -> bytes:
    obj = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}],
    }
    if cum is not None:
        obj["usage"] = {"prompt_tokens": 7, "completion_tokens": cum, "total_tokens": 7 + cum}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


ROLE = b'data: {"id":"chatcmpl-scripted","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":{"prompt_tokens":7,"completion_tokens":0,"total_tokens":7}}\n\n'
TRAILER = b'data: {"id":"chatcmpl-scripted","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}}\n\n'
DONE = b"data: [DONE]\n\n"


def pace(seconds: float) -> None:
    """Sleep ``seconds`` from now. gevent's timers count from the event loop's cached time, which
    is as old as the loop's last turn: a write made late (the process descheduled between its
    wake-up and the write) would be followed by the next one less than ``seconds`` later, two
    events close enough to arrive together, and a client test would blame the client. Reading
    the clock first keeps every pause at least ``seconds`` long; a late server only widens gaps."""
    gevent.get_hub().loop.update_now()
    gevent.sleep(seconds)


def flood_events():
    """``flood``: one-token content events without end or pause (a runaway server)."""
    yield ROLE
    event = chunk(0, "x", None)  # made once: the flood is bounded by the reader, not by JSON encoding
    while True:
        yield event


def usage_events(name: str, n: int, q: dict[str, str]) -> list[bytes | float | str]:
    """``usage_value``: n content chunks, then a usage trailer whose completion_tokens is the raw
    text ``q["value"]``; ``cum_values``: one content chunk per raw cumulative value in
    ``q["cums"]`` (comma-separated), each with that usage."""
    ev: list[bytes | float | str] = [ROLE]
    if name == "cum_values":
        for i, raw in enumerate(q["cums"].split(",")):
            ev.append(b'data: {"id":"chatcmpl-scripted","choices":[{"index":0,"delta":{"content":"w%d "},'
                      b'"finish_reason":null}],"usage":{"prompt_tokens":7,"completion_tokens":%s}}\n\n'
                      % (i, raw.encode()))
    else:
        ev.extend(chunk(i, f"w{i} ", None, "length" if i == n - 1 else None) for i in range(n))
        ev.append(b'data: {"id":"chatcmpl-scripted","choices":[],"usage":{"prompt_tokens":7,'
                  b'"completion_tokens":%s}}\n\n' % q["value"].encode())
    ev.append(DONE)
    return ev


def script_events(name: str, n: int, per_chunk: int) -> list[bytes | float | str]:
    """Bytes to write, floats are extra sleeps (s), 'CUT' closes the socket, 'STALL' sleeps 60 s."""
    ev: list[bytes | float | str] = [ROLE]
    cum = 0
    for i in range(n):
        cum += per_chunk
        usage = None if name in ("no_usage", "usage_trailer_only") else cum
        text = " ".join(f"w{i}_{k}" for k in range(per_chunk))
        c = chunk(i, text + " ", usage, "length" if i == n - 1 else None)
        if name == "crlf":
            c = c.replace(b"\n", b"\r\n")
        if name == "keepalive":
            ev.append(b": keep-alive\n\n")
        if name == "no_blank_lines":
            c = c.replace(b"\n\n", b"\n")
        if name == "split" and len(c) > 20:
            ev.extend([c[:13], 0.002, c[13:]])
            continue
        ev.append(c)
        if name == "cut" and i == n // 2:
            return ev + ["CUT"]
        if name == "stall" and i == n // 2:
            return ev + ["STALL"]
    if name == "invalid_json":
        ev.insert(2, b"data: {not json\n\n")
    if name == "event_error":
        ev.append(b'event: error\ndata: {"error": {"message": "engine died", "type": "InternalServerError"}}\n\n')
        return ev
    if name not in ("no_usage",):
        ev.append(TRAILER % (cum, 7 + cum))
    if name != "no_done":
        ev.append(DONE)
    return ev


def handle(sock, _addr) -> None:
    # Like real servers (uvicorn, the simulator): no Nagle delay of small writes behind an
    # unacknowledged one (with the client's delayed ACK, that held answers for ~40 ms).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = sock.makefile("rb")
    answered = 0  # requests answered on this connection
    try:
        while True:
            line = f.readline()
            if not line:
                return
            method, target, _ = line.decode().split(" ", 2)
            length = 0
            while True:
                h = f.readline()
                if h in (b"\r\n", b"\n", b""):
                    break
                k, _, v = h.decode().partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v.strip())
            if length:
                f.read(length)
            url = urlsplit(target)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            name = url.path.strip("/").split("/")[0]
            if name == "closes_kept_alive" and answered:
                # A server that closes a kept-alive connection instead of answering on it
                # (what a close racing the client's next request looks like from the client).
                sock.close()
                return
            answered += 1
            gap = float(q.get("gap_ms", "5")) / 1000.0
            n = int(q.get("n", "5"))
            per_chunk = int(q.get("per_chunk", "1"))
            if name.startswith("http_"):
                code = int(name[5:])
                body = json.dumps({"error": {"message": f"scripted {code}", "type": "RateLimitError" if code == 429 else "ServerError", "code": code}}).encode()
                sock.sendall(b"HTTP/1.1 %d Err\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (code, len(body), body))
                continue
            if name == "json_chunked":
                # A non-streamed answer framed in chunks (servers that do not compute a length).
                body = json.dumps({"id": "chatcmpl-json", "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "w0 w1 w2"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}).encode()
                half = len(body) // 2
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, body[:half], len(body) - half, body[half:]))
                continue
            if name == "slow_headers":
                gevent.sleep(float(q.get("delay_s", "5")))
            close_delimited = name == "close_delimited"
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            head += b"Connection: close\r\n\r\n" if close_delimited else b"Transfer-Encoding: chunked\r\n\r\n"
            if name == "glued":
                # The headers and the first `glue` bytes of the chunked body in one write, so the
                # client's header read also parses part of the body (at any framing position).
                frames = [b"%x\r\n%s\r\n" % (len(e), e) for e in script_events(name, n, per_chunk)]
                body, glue = b"".join(frames) + b"0\r\n\r\n", int(q.get("glue", "0"))
                gevent.sleep(float(q.get("delay_ms", "0")) / 1000.0)
                sock.sendall(head + body[:glue])
                pace(gap)
                pos = 0
                for frame in frames + [b"0\r\n\r\n"]:
                    pos += len(frame)
                    if pos > glue:
                        sock.sendall(body[max(glue, pos - len(frame)):pos])
                        pace(gap)
                continue
            sock.sendall(head)
            # together=k: every k content events in one write (llama.cpp's server writes a
            # speculative step's accepted tokens so), with the gap after each write.
            together, pending, written = int(q.get("together", "1")), b"", 0
            if name in ("usage_value", "cum_values"):
                events = usage_events(name, n, q)
            elif name == "flood":
                events, gap = flood_events(), 0.0
            else:
                events = script_events(name, n, per_chunk)
            for item in events:
                if together > 1 and isinstance(item, bytes):
                    pending += b"%x\r\n%s\r\n" % (len(item), item)
                    if item.startswith(b"data: {") and b'"content": "' in item:
                        written += 1
                        if written % together == 0:
                            sock.sendall(pending)
                            pending = b""
                            pace(gap)
                    continue
                if pending:
                    sock.sendall(pending)
                    pending = b""
                if item == "CUT":
                    sock.close()
                    return
                if item == "STALL":
                    gevent.sleep(60)
                    return
                if isinstance(item, float):
                    pace(item)
                    continue
                data = item if close_delimited else b"%x\r\n%s\r\n" % (len(item), item)
                if name == "cut_frames":  # every HTTP chunk in two writes: reads end inside chunks
                    sock.sendall(data[:len(data) // 2])
                    pace(0.002)
                    data = data[len(data) // 2:]
                sock.sendall(data)
                if gap and item.startswith(b"data: {") and b'"content": "' in item:
                    pace(gap)
            if close_delimited:
                sock.close()
                return
            sock.sendall(pending + b"0\r\n\r\n")
    except (OSError, ValueError):
        return
    finally:
        try:
            sock.close()
        except OSError:
            pass


if __name__ == "__main__":
    import os

    port = int(sys.argv[1])
    tls = {}
    if os.environ.get("SCRIPTED_TLS_CERT"):
        tls = {"certfile": os.environ["SCRIPTED_TLS_CERT"], "keyfile": os.environ["SCRIPTED_TLS_KEY"]}
    server = StreamServer(("127.0.0.1", port), handle, **tls)
    print("ready", flush=True)
    deadline = time.monotonic() + float(sys.argv[2]) if len(sys.argv) > 2 else None
    server.start()
    while deadline is None or time.monotonic() < deadline:
        gevent.sleep(0.5)
    server.stop()
