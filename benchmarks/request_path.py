"""Per-request work of the generator, stage by stage, in microseconds per request (no network).

What one request of the ``--workload spec`` benchmark (scenarios/qa.yaml, 256-token answers in
~86 chunks of 3 tokens) costs the generator outside the per-chunk reading, measured on the
real code with a scripted stream: prompt building, the request key and body, the request's
head (request line and headers, as ``send_request`` writes them), the record's
identity fields, building the record from the stream state, the sequence number, the live
histograms, encoding the record line and redacting it in the writer's batch, and Locust's
request event (``emit``, with a sink that drops the line; the script checks that ``emit`` numbers
the record in place, as the ``seq`` line times, and stops if it copies). Each stage is timed over many requests and reported as µs per request; the
``redact (batch)`` line is the writer's redaction of a 256 KiB batch, per record in it.

    python benchmarks/request_path.py
    python benchmarks/request_path.py --requests 3000 --chunks 86 --tokens-per-chunk 3 --rounds 5
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
from geventhttpclient import HTTPClient  # noqa: E402

from tokenswarm import redact  # noqa: E402
from tokenswarm.load.context import RunContext, request_key  # noqa: E402
from tokenswarm.record import UNNUMBERED  # noqa: E402
from tokenswarm.wire.send import request_head  # noqa: E402
from tokenswarm.wire.stream import StreamState  # noqa: E402
from tokenswarm.workload.prompts import PromptSource  # noqa: E402
from tokenswarm.workload.scenario import load_scenario  # noqa: E402


class _NullSink:
    def add(self, record: Any) -> None:
        pass


def _events(chunks: int, per_chunk: int) -> list[list[tuple]]:
    """One read per chunk: the SSE events a truth-server stream of ``chunks`` chunks sends."""
    reads = [[(None, orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "truth",
                                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))]]
    for i in range(chunks):
        reads.append([(None, orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "truth",
                                           "choices": [{"index": 0, "delta": {"content": " tok" * per_chunk},
                                                        "finish_reason": "length" if i == chunks - 1 else None}]}))])
    reads.append([(None, orjson.dumps({"id": "chatcmpl-1", "choices": [],
                                       "usage": {"prompt_tokens": 60, "completion_tokens": chunks * per_chunk}})),
                  (None, b"[DONE]")])
    return reads


def _timed(name: str, n: int, fn: Callable[[int], Any], rows: list) -> Any:
    out = None
    t0 = time.perf_counter()
    for i in range(n):
        out = fn(i)
    rows.append((name, (time.perf_counter() - t0) / n * 1e6))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--chunks", type=int, default=86)
    ap.add_argument("--tokens-per-chunk", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5, help="the whole pipeline this many times; the fastest round "
                                                           "of each stage is reported (a shared machine)")
    args = ap.parse_args()
    best: dict[str, float] = {}
    line_bytes = 0
    for _ in range(args.rounds):
        rows, line_bytes = one_round(args)
        for name, us in rows:
            best[name] = min(us, best.get(name, us))
    total = sum(us for name, us in best.items() if not name.startswith("emit"))
    print(f"per-request stages, {args.requests} requests of {args.chunks} chunks x {args.tokens_per_chunk} tokens "
          f"(record line {line_bytes} bytes), fastest of {args.rounds} rounds")
    for name, us in best.items():
        print(f"  {name:<34} {us:8.1f} us")
    print(f"  {'sum (without emit)':<34} {total:8.1f} us")
    return 0


def one_round(args) -> tuple[list[tuple[str, float]], int]:
    """Every stage once over ``args.requests`` requests: (stage, µs per request), record line size."""
    n = args.requests
    sc = load_scenario(ROOT / "scenarios" / "qa.yaml", {"target.metrics_url": None})
    task = sc.traffic.classes[0]
    source = PromptSource(task, None, seed=1234, api=sc.target.api)
    ctx = RunContext(scenario=sc, run_id="r", worker_id="w", base_url="http://127.0.0.1:9", model="truth",
                     sink=_NullSink(), role="local", prompt_sources={task.name: source},
                     request_event=lambda **kw: None)
    rng = random.Random(1)
    rows: list[tuple[str, float]] = []
    reads = _events(args.chunks, args.tokens_per_chunk)

    for _ in range(10):  # warm
        source.next_prompt(rng)
    prompts: list = []
    _timed("prompt (next_prompt)", n, lambda i: prompts.append(source.next_prompt(rng)), rows)
    sampling = task.sampling.params()

    def key_body(i: int) -> tuple:
        p = prompts[i]
        payload = list(p.messages)
        return (request_key(ctx.api, payload, p.max_tokens, sampling),
                ctx.body("messages", payload, p.max_tokens, sampling))

    kb = [None] * n
    _timed("request key + body", n, lambda i: kb.__setitem__(i, key_body(i)), rows)
    http = HTTPClient("127.0.0.1", 9)
    _timed("request head (send_request)", n, lambda i: request_head(http, ctx.path, kb[i][1], ctx.headers), rows)
    bases = [None] * n
    _timed("record identity (ctx.base)", n, lambda i: bases.__setitem__(i, ctx.base(
        task=task.name, user_class="QAUser", scheduled_s=100.0, key=kb[i][0],
        max_tokens=prompts[i].max_tokens, temperature=sampling.get("temperature"))), rows)

    states = []
    for _ in range(n):
        st = StreamState(100.0)
        for j, evs in enumerate(reads):
            st.on_events(100.0 + 0.005 * j, evs)
        states.append(st)
    phase = {"schedule_lag_ms": 1.0, "conn_reused": True, "connect_ms": None, "send_delay_ms": 1.0,
             "headers_ms": 2.0}
    records = [None] * n

    # the phase fields and the identity apart, as the client hands them over
    _timed("record (state.finish)", n, lambda i: records.__setitem__(i, states[i].finish(
        101.0, http_status=200, anchor=ctx.anchor, base=dict(phase), identity=bases[i])), rows)
    _timed("seq (numbered, in place)", n, lambda i: records[i].numbered(i), rows)
    _timed("live histograms (observe)", n, lambda i: ctx.live.observe(records[i]), rows)
    lines = [None] * n
    _timed("record line (to_json)", n, lambda i: lines.__setitem__(i, records[i].to_json() + b"\n"), rows)
    batch = b"".join(lines[:max(1, (256 * 1024) // len(lines[0]))])
    per_batch = batch.count(b"\n")
    reps = max(1, n // per_batch)
    _timed("redact (batch, per record)", reps, lambda i: redact.redact_bytes(batch), rows)
    rows[-1] = (rows[-1][0], rows[-1][1] / per_batch)
    ctx.live = type(ctx.live)()
    for r in records:  # emit numbers unnumbered (just built) records, as in a run
        object.__setattr__(r, "seq", UNNUMBERED)
    _timed("emit (seq, stats, event; null sink)", n, lambda i: ctx.emit(records[i]), rows)
    # The path a run takes: emit numbers the record it was given in place (no ~50-field copy).
    probe = records[0]
    object.__setattr__(probe, "seq", UNNUMBERED)
    if ctx.emit(probe) is not probe:
        raise SystemExit("RunContext.emit copied the record: the 'seq' line above is not the path a run takes")
    return rows, len(lines[0])


if __name__ == "__main__":
    raise SystemExit(main())
