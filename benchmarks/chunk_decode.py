"""Per-event CPU of reading a streamed completion chunk: C, typed (msgspec) and general (dicts).

``StreamState.on_events`` reads the commonest payload, an OpenAI-style chat completion chunk,
in C when the extension is built (``feed_chunks``, ``tokenswarm/wire/_chunks.c``: the JSON and
the state's update together), else through :func:`tokenswarm.wire.chunkjson.decode_chunk`
(msgspec structs holding only what the stream state uses), and every other shape through the
general path (orjson into dicts). This script feeds the same events, shaped as vLLM sends them
(with per-chunk usage, as tokenswarm asks for by default, and without), through all three and
prints µs per event and the ratios, measured in one run (fastest of ``--rounds``). No network:
only the decoding and the stream state.

    python benchmarks/chunk_decode.py
    python benchmarks/chunk_decode.py --events 256 --rounds 7
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from tokenswarm.wire import stream  # noqa: E402
from tokenswarm.wire.stream import StreamState  # noqa: E402


def events(n: int, usage: bool, tokens_per_chunk: int) -> list[tuple]:
    """One response's events as vLLM's OpenAI server writes them (role chunk, content, finish)."""
    out = []
    for i in range(n + 1):
        delta = {"role": "assistant", "content": ""} if i == 0 else {"content": " w" * tokens_per_chunk}
        o = {"id": "chatcmpl-2b8663bddad2474d9b037c2fb3765790", "object": "chat.completion.chunk",
             "created": 1796140500, "model": "meta-llama/Llama-3.1-8B-Instruct",
             "choices": [{"index": 0, "delta": delta, "logprobs": None,
                          "finish_reason": "length" if i == n else None}]}
        if usage:
            o["usage"] = {"prompt_tokens": 27, "total_tokens": 27 + i * tokens_per_chunk,
                          "completion_tokens": i * tokens_per_chunk}
        out.append((None, orjson.dumps(o)))
    return out + [(None, b"[DONE]")]


def per_event_us(evs: list[tuple], responses: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _r in range(responses):
            s = StreamState(0.0)
            on = s.on_events
            for i, e in enumerate(evs):
                on(0.001 * i, [e])  # one event per read, as the reader delivers them
        best = min(best, time.perf_counter() - t0)
    return best / (responses * len(evs)) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=86, help="content chunks per response (86: the spec workload)")
    ap.add_argument("--tokens-per-chunk", type=int, default=3)
    ap.add_argument("--responses", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    typed_decode, native = stream.decode_chunk, stream._feed_chunks
    print(f"{a.events} content chunks of {a.tokens_per_chunk} tokens per response, one event per call, "
          f"fastest of {a.rounds} rounds of {a.responses} responses; C path: "
          f"{'built' if native is not None else 'NOT built (or TOKENSWARM_NATIVE=0)'}")
    try:
        for usage in (True, False):
            evs = events(a.events, usage, a.tokens_per_chunk)
            c = per_event_us(evs, a.responses, a.rounds) if native is not None else None
            stream._feed_chunks = None
            typed = per_event_us(evs, a.responses, a.rounds)
            stream.decode_chunk = lambda data: None  # every event down the general path
            general = per_event_us(evs, a.responses, a.rounds)
            stream.decode_chunk, stream._feed_chunks = typed_decode, native
            label = "with per-chunk usage" if usage else "without usage"
            c_part = f"C {c:5.2f} us/event   typed / C {typed / c:.2f}x   " if c else ""
            print(f"  {label:<22} {c_part}typed {typed:5.2f} us/event   general {general:5.2f} us/event   "
                  f"general / typed {general / typed:.2f}x")
    finally:
        stream.decode_chunk, stream._feed_chunks = typed_decode, native
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
