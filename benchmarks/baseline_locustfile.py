"""The baseline of benchmarks/generator.py: a plain Locust FastHttpUser reading SSE with
``response.stream.readline(b"\\n")`` and ``json.loads`` per event (Locust's documented
pattern). It counts the events it read and writes the count at exit.

Like any script that wants token timings, it notes when it read each event that carries
text (``time.perf_counter()`` after the ``readline``) and the response id; with
``BENCH_TIMES_FILE`` set these are written at exit, one JSON line per request, so the
benchmark can join them to the simulator's ground truth as it does tokenswarm's records."""

import json
import os
import time

from locust import FastHttpUser, constant, events, task

COUNT = {"events": 0, "requests": 0}
TIMES: list[tuple] = []  # (response id, request start, [arrival of each text event]) per request


class PlainStreamUser(FastHttpUser):
    wait_time = constant(0)
    network_timeout = 600.0

    @task
    def chat(self):
        body = {"model": os.environ.get("BENCH_MODEL", "sim-bench"), "stream": True,
                "max_tokens": int(os.environ.get("BENCH_MAX_TOKENS", "200")),
                "ignore_eos": True, "messages": [{"role": "user", "content": "benchmark please"}],
                "stream_options": {"include_usage": True}}
        t0 = time.perf_counter()
        with self.client.post("/v1/chat/completions", json=body, stream=True, catch_response=True, name="chat",
                              headers={"Accept": "text/event-stream", "Accept-Encoding": "identity"}) as resp:
            raw = resp.stream
            n = 0
            rid, arrivals = None, []
            while True:
                line = raw.readline(b"\n")
                now = time.perf_counter()
                if not line:
                    break
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    continue
                obj = json.loads(payload)
                n += 1
                choices = obj.get("choices")
                if choices and choices[0].get("delta", {}).get("content"):
                    rid = obj.get("id")
                    arrivals.append(now)
            COUNT["events"] += n
            COUNT["requests"] += 1
            TIMES.append((rid, t0, arrivals))
            resp.request_meta["response_time"] = (time.perf_counter() - t0) * 1000


@events.quitting.add_listener
def _write(environment, **kw):
    path = os.environ.get("BENCH_COUNT_FILE")
    if path:
        with open(path, "w") as fh:
            json.dump(COUNT, fh)
    path = os.environ.get("BENCH_TIMES_FILE")
    if path:
        with open(path, "w") as fh:
            for rid, start, arrivals in TIMES:
                fh.write(json.dumps({"id": rid, "ttft_ms": (arrivals[0] - start) * 1000.0 if arrivals else None,
                                     "offsets_ms": [(t - start) * 1000.0 for t in arrivals]}) + "\n")
