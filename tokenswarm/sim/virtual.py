"""Drive the engine model in virtual time (no sockets, no sleeping): closed-loop users.

Used by ``benchmarks/sim_throughput.py`` and unit tests to predict what a real run against
the simulator should show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenswarm.sim.engine import Scheduler, SpecConfig
from tokenswarm.sim.profiles import Profile
from tokenswarm.sim.sequence import Sequence
from tokenswarm.sim.tokenizer import chat_prompt, tokenize


@dataclass
class VirtualResult:
    """Outcome of one request in virtual time."""

    ttft_s: float
    e2e_s: float
    output_tokens: int
    chunks: int


def make_sequence(rid: str, messages: list[dict[str, Any]], max_tokens: int, profile: Profile, temperature: float = 0.0,
                  ignore_eos: bool = True, seed: int | None = None) -> Sequence:
    """A sequence built the same way the HTTP server builds one for a chat request."""
    prompt = tokenize(chat_prompt(messages))
    source: list[str] = []
    for m in messages:
        c = m["content"]
        source.extend(tokenize(c if c[:1].isspace() else " " + c))
    return Sequence(rid, len(prompt), source, max_tokens, temperature=temperature, seed=seed,
                    ignore_eos=ignore_eos, natural_range=profile.natural_output_tokens)


def closed_loop(profile: Profile, spec: SpecConfig, prompts: list[list[dict[str, Any]]], concurrency: int,
                requests_per_user: int, max_tokens: int, temperature: float = 0.0) -> tuple[list[VirtualResult], float]:
    """``concurrency`` users each send ``requests_per_user`` requests back to back.

    Returns the per-request results and the virtual duration of the run (seconds).
    """
    sched = Scheduler(profile, spec)
    now = 0.0
    results: list[VirtualResult] = []
    remaining = [requests_per_user] * concurrency
    counter = 0
    info: dict[int, list[Any]] = {}

    def submit(user: int, t: float) -> None:
        nonlocal counter
        seq = make_sequence(f"v{counter}", prompts[counter % len(prompts)], max_tokens, profile, temperature)
        counter += 1
        seq.sink = user
        info[id(seq)] = [t, None, 0]
        sched.submit(seq, t)
        remaining[user] -= 1

    for u in range(concurrency):
        submit(u, now)
    sched.advance(now)
    while True:
        deadline = sched.next_deadline()
        if deadline is None:
            break
        now = deadline
        for e in sched.advance(now):
            rec = info[id(e.seq)]
            if rec[1] is None:
                rec[1] = e.scheduled_s
            rec[2] += 1
            if e.finish_reason is not None:
                results.append(VirtualResult(rec[1] - rec[0], e.scheduled_s - rec[0], e.seq.n_out, rec[2]))
                if remaining[e.seq.sink] > 0:
                    submit(e.seq.sink, now)
        sched.advance(now)  # start a step for requests submitted at this instant
    return results, now
