"""The baseline of benchmarks/generator.py: a plain Locust FastHttpUser reading SSE with
``response.stream.readline(b"\\n")`` and ``json.loads`` per event (Locust's documented
pattern). It counts the events it read and writes the count at exit."""

import json
import os
import time

from locust import FastHttpUser, constant, events, task

COUNT = {"events": 0, "requests": 0}


class PlainStreamUser(FastHttpUser):
    wait_time = constant(0)
    network_timeout = 600.0

    @task
    def chat(self):
        body = {"model": os.environ.get("BENCH_MODEL", "sim-bench"), "stream": True, "max_tokens": 200,
                "ignore_eos": True, "messages": [{"role": "user", "content": "benchmark please"}],
                "stream_options": {"include_usage": True}}
        t0 = time.perf_counter()
        with self.client.post("/v1/chat/completions", json=body, stream=True, catch_response=True, name="chat",
                              headers={"Accept": "text/event-stream", "Accept-Encoding": "identity"}) as resp:
            raw = resp.stream
            n = 0
            while True:
                line = raw.readline(b"\n")
                if not line:
                    break
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    continue
                json.loads(payload)
                n += 1
            COUNT["events"] += n
            COUNT["requests"] += 1
            resp.request_meta["response_time"] = (time.perf_counter() - t0) * 1000


@events.quitting.add_listener
def _write(environment, **kw):
    path = os.environ.get("BENCH_COUNT_FILE")
    if path:
        with open(path, "w") as fh:
            json.dump(COUNT, fh)
