"""A stand-in for llama.cpp's ``llama-server --metrics`` with speculation, for dialect tests.

Run as ``python fake_llamacpp.py PORT [LIFETIME_S]``. It behaves the way the issue describes
llama.cpp's server (one word = one token):

* ``POST /tokenize`` reads ``content`` and answers ``{"tokens": [...]}``; a vLLM-style
  ``{"prompt"}`` body gets ``{"tokens": []}``;
* ``POST /v1/chat/completions`` streams one SSE event per token, no per-chunk usage; the
  finish chunk carries ``usage`` and ``timings`` (``draft_n``, ``draft_n_accepted``);
* ``GET /metrics`` has ``llamacpp:`` names, including the ``llamacpp:spec_decode_*`` counters
  of the speculative build with ``{position}``.

Every verify round drafts 4 tokens and accepts the first 2 (so positions 0 and 1 accept).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: its sibling modules
from jsonhttp import JSONHandler, serve

K, ACCEPT = 4, 2
STATS = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "predicted": 0, "prompt": 0, "processing": 0}
LOCK = threading.Lock()


def metrics_text() -> str:
    with LOCK:
        s = dict(STATS)
    lines = [
        "# TYPE llamacpp:prompt_tokens_total counter", f"llamacpp:prompt_tokens_total {s['prompt']}",
        "# TYPE llamacpp:tokens_predicted_total counter", f"llamacpp:tokens_predicted_total {s['predicted']}",
        "# TYPE llamacpp:kv_cache_usage_ratio gauge", "llamacpp:kv_cache_usage_ratio 0.1",
        "# TYPE llamacpp:requests_processing gauge", f"llamacpp:requests_processing {s['processing']}",
        "# TYPE llamacpp:requests_deferred gauge", "llamacpp:requests_deferred 0",
        "# TYPE llamacpp:spec_decode_num_drafts_total counter", f"llamacpp:spec_decode_num_drafts_total {s['drafts']}",
        "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter",
        f"llamacpp:spec_decode_num_draft_tokens_total {s['draft_tokens']}",
        "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter",
        f"llamacpp:spec_decode_num_accepted_tokens_total {s['accepted']}",
        "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{p}"}} '
              f'{s["drafts"] if p < ACCEPT else 0}' for p in range(K)]
    return "\n".join(lines) + "\n"


class Handler(JSONHandler):
    def do_GET(self) -> None:
        if self.path == "/v1/models":
            return self.answer_json(200, {"object": "list", "data": [{"id": "llama-test", "object": "model"}]})
        if self.path == "/health":
            return self.answer_json(200, {"status": "ok"})
        if self.path == "/metrics":
            body = metrics_text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.answer_json(404, {"error": {"message": "not found", "type": "not_found_error"}})

    def do_POST(self) -> None:
        data = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path == "/tokenize":
            words = str(data.get("content", "")).split()
            return self.answer_json(200, {"tokens": list(range(len(words)))})
        if self.path != "/v1/chat/completions":
            return self.answer_json(404, {"error": {"message": "not found", "type": "not_found_error"}})
        prompt_n = sum(len(str(m.get("content", "")).split()) for m in data.get("messages", []))
        n = int(data.get("max_tokens") or 16)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        with LOCK:
            STATS["processing"] += 1

        def send(obj) -> None:
            payload = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            self.wfile.flush()

        head = {"id": "chatcmpl-llama", "object": "chat.completion.chunk", "model": "llama-test"}
        rounds = 0
        for i in range(n):
            if i % (ACCEPT + 1) == 0:
                rounds += 1
                time.sleep(0.004)  # one verify round, then its tokens leave as a burst
            send({**head, "choices": [{"index": 0, "delta": {"content": f"w{i} "}, "finish_reason": None}]})
        accepted = n - rounds
        timings = {"prompt_n": prompt_n, "prompt_ms": 5.0, "predicted_n": n, "predicted_ms": 4.0 * rounds,
                   "draft_n": K * rounds, "draft_n_accepted": accepted}
        send({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
              "usage": {"prompt_tokens": prompt_n, "completion_tokens": n, "total_tokens": prompt_n + n},
              "timings": timings})
        send(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        with LOCK:
            STATS["processing"] -= 1
            STATS["drafts"] += rounds
            STATS["draft_tokens"] += K * rounds
            STATS["accepted"] += accepted
            STATS["predicted"] += n
            STATS["prompt"] += prompt_n


if __name__ == "__main__":
    serve(Handler)
