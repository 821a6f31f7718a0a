"""The baseline of benchmarks/generator.py: a plain Locust FastHttpUser reading SSE with
``response.stream.readline(b"\\n")`` and ``json.loads`` per event (Locust's documented
pattern). It counts the events it read and writes the count at exit.

Like any script that wants token timings, it notes when it read each event that carries
text (``time.perf_counter()`` after the ``readline``) and the response id; with
``BENCH_TIMES_FILE`` set these are written at exit, one JSON line per request, so the
benchmark can join them to the simulator's ground truth as it does tokenswarm's records.

**The request bodies.** Unset ``BENCH_BODIES_FILE``: every request asks for the two-word
prompt "benchmark please" with ``BENCH_MAX_TOKENS`` tokens and ``ignore_eos`` (the earlier
runs' baseline). Set: a file of ``THINK_S<TAB>BODY`` lines, pre-serialised request bodies
which the users cycle through in order (one shared position) and send as they are, bytes in,
no ``json=`` serialisation -- what a plain Locust script with prepared bodies pays -- each
followed by its think time (the scenario's: a multi-turn conversation's between its turns).
``benchmarks/request_cost.py --only compare`` writes that file with tokenswarm's own
workload code (``benchmarks/bench_bodies.py``) from the scenario tokenswarm runs in the same
case, so both clients send the same prompts, answer lengths, messages, ``response_format``
and sampling, and the server prefills and streams the same work for both."""

import json
import os
import time

from locust import FastHttpUser, constant, events, task

COUNT = {"events": 0, "requests": 0}
TIMES: list[tuple] = []  # (response id, request start, [arrival of each text event]) per request


def _bodies() -> list[tuple[float, bytes]]:
    """``(think_s, body)`` per line of ``THINK_S<TAB>BODY`` (benchmarks/bench_bodies.py)."""
    path = os.environ.get("BENCH_BODIES_FILE")
    if not path:
        return []
    with open(path, "rb") as fh:
        lines = [line.rstrip(b"\n").split(b"\t", 1) for line in fh if line.strip()]
    if not lines:
        raise SystemExit(f"BENCH_BODIES_FILE {path}: no bodies")
    return [(float(think), body) for think, body in lines]


BODIES = _bodies()
NEXT_BODY = [0]  # the shared position in BODIES


class PlainStreamUser(FastHttpUser):
    wait_time = constant(0)
    network_timeout = 600.0

    @task
    def chat(self):
        if BODIES:
            i = NEXT_BODY[0]
            NEXT_BODY[0] = (i + 1) % len(BODIES)
            think_s, body = BODIES[i]
            send = {"data": body}
        else:
            send = {"json": {"model": os.environ.get("BENCH_MODEL", "sim-bench"), "stream": True,
                             "max_tokens": int(os.environ.get("BENCH_MAX_TOKENS", "200")),
                             "ignore_eos": True, "messages": [{"role": "user", "content": "benchmark please"}],
                             "stream_options": {"include_usage": True}}}
        t0 = time.perf_counter()
        with self.client.post("/v1/chat/completions", stream=True, catch_response=True, name="chat",
                              headers={"Accept": "text/event-stream", "Accept-Encoding": "identity",
                                       "Content-Type": "application/json"}, **send) as resp:
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
        if BODIES and think_s > 0:
            time.sleep(think_s)  # the scenario's think time after this request (gevent's sleep under Locust)


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
