"""One request inside the engine model: :class:`Sequence`, and :class:`Emission`, what one step gave it.

A sequence holds what the request asked for (prompt length, ``max_tokens``, stop strings, the
stall fault), the text it generates (:class:`~tokenswarm.sim.textgen.TargetText`, or
:class:`~tokenswarm.sim.guided.GuidedText` for a ``response_format``), its progress and times,
and its speculative-decoding tallies, summed up vLLM-style by :meth:`Sequence.spec_summary`.
The :class:`~tokenswarm.sim.engine.Scheduler` advances it; nothing here knows steps or time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tokenswarm.sim.guided import GuidedText
from tokenswarm.sim.textgen import NgramIndex, TargetText


class Sequence:
    """One request inside the engine."""

    __slots__ = (
        "rid", "prompt_len", "source", "max_tokens", "ignore_eos", "stops", "text", "ngram",
        "arrival_s", "admitted_s", "first_token_s", "finished_s", "prefilled", "n_out",
        "out_tail", "finish_reason", "aborted", "kv_reserved", "paused_until", "stall_after",
        "stall_s", "stalled", "spec_steps", "spec_drafted", "spec_accepted", "accept_hist",
        "sink", "max_stop",
    )

    def __init__(
        self,
        rid: str,
        prompt_len: int,
        source: list[str],
        max_tokens: int,
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        ignore_eos: bool = False,
        stops: list[str] | None = None,
        natural_range: tuple[int, int] = (64, 512),
        stall_after: int | None = None,
        stall_s: float = 0.0,
        sink: Any = None,
        guided: dict[str, Any] | None = None,
    ) -> None:
        self.rid = rid
        self.prompt_len = prompt_len
        self.source = source
        self.max_tokens = max_tokens
        self.ignore_eos = ignore_eos
        self.stops = [s for s in (stops or []) if s]
        self.max_stop = max((len(s) for s in self.stops), default=0)
        if guided is None:
            self.text = TargetText(source, temperature, top_p, seed, natural_range)
        else:  # response_format: the answer is a JSON instance of the schema

            self.text = GuidedText(source, guided, temperature, top_p, seed, natural_range)
        self.ngram: NgramIndex | None = None
        self.arrival_s = 0.0
        self.admitted_s: float | None = None
        self.first_token_s: float | None = None
        self.finished_s: float | None = None
        self.prefilled = 0
        self.n_out = 0
        self.out_tail = ""
        self.finish_reason: str | None = None
        self.aborted = False
        self.kv_reserved = 0
        self.paused_until = 0.0
        self.stall_after = stall_after
        self.stall_s = stall_s
        self.stalled = False
        self.spec_steps = 0
        self.spec_drafted = 0
        self.spec_accepted = 0
        self.accept_hist: list[int] = []
        self.sink = sink

    @property
    def done(self) -> bool:
        return self.finish_reason is not None or self.aborted

    def kv_used(self) -> int:
        """KV tokens actually held now (prompt computed so far + generated)."""
        return self.prefilled + self.n_out

    def spec_summary(self) -> dict[str, Any] | None:
        """vLLM-style per-request ``metrics.speculative_decoding`` summary (None if no drafts)."""
        if not self.spec_steps:
            return None
        return {
            "mean_acceptance_length": 1.0 + self.spec_accepted / self.spec_steps,
            "draft_acceptance_rate": self.spec_accepted / self.spec_drafted if self.spec_drafted else 0.0,
            "acceptance_histogram": list(self.accept_hist),
            "num_spec_steps": self.spec_steps,
            "num_accepted_draft_tokens": self.spec_accepted,
            "num_draft_tokens": self.spec_drafted,
            "num_spec_tokens": len(self.accept_hist) - 1,
        }


@dataclass(slots=True)
class Emission:
    """Tokens one sequence produced in one step, due at ``scheduled_s``."""

    seq: Sequence
    text: str
    n_tokens: int
    finish_reason: str | None
    scheduled_s: float
    #: the step's tokens one by one, when each should leave as its own SSE event (tokens_per_step)
    pieces: list[str] | None = None
