"""The engine model: a pure, time-injected scheduler of a simulated GPU.

Nothing here sleeps or reads a clock: callers pass ``now`` (seconds, any monotonic
origin). The serving loop does ``emissions = sched.advance(now)`` and then sleeps until
``sched.next_deadline()``; unit tests do the same with a fake clock. A request inside the
engine is a :class:`~tokenswarm.sim.sequence.Sequence`, and what a step gives it an
:class:`~tokenswarm.sim.sequence.Emission`.

Step time (continuous batching, one step for all running sequences)::

    mem_s     = weights_read_s + kv_read_s_per_token * context_tokens
    compute_s = flops_per_token_s * verify_tokens + prefill_tokens / prefill_tokens_per_s
    draft_s   = K * (draft.pass_s + draft.flops_per_token_s * n_drafting) * slow_factor   (draft)
              = ngram.lookup_s_per_seq * n_decoding                                      (ngram)
    step_s    = overhead_s + max(mem_s, compute_s) + draft_s

``verify_tokens`` is 1 per decoding sequence, 1 + k with k draft tokens. Prompts are
prefilled in chunks within ``max_num_batched_tokens``; the first token comes out at the end
of the step that completes the prompt. Admission is FIFO and needs a free slot
(``max_num_seqs``) and KV room for ``prompt + output (+ K)`` where the output is ``max_tokens``
or, without ``ignore_eos``, the (known) natural length if shorter.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from tokenswarm.sim.profiles import Profile
from tokenswarm.sim.sequence import Emission, Sequence
from tokenswarm.sim.textgen import NgramIndex, unit_hash

SPEC_METHODS = ("none", "draft", "ngram")


@dataclass(frozen=True)
class SpecConfig:
    """Speculative decoding settings of the engine."""

    method: str = "none"  #: none | draft | ngram
    k: int = 4  #: draft tokens per step
    divergence_rate: float = 0.0  #: fault: probability that a verify step emits a wrong token
    seed: int = 0

    @property
    def enabled(self) -> bool:
        return self.method != "none" and self.k > 0


@dataclass(slots=True)
class _Entry:
    seq: Sequence
    prefill_chunk: int = 0  #: >0: prefill step entry
    completes_prefill: bool = False
    tokens: list[str] | None = None  #: decode: tokens to emit
    k: int = 0  #: draft tokens verified
    accepted: int = 0


@dataclass
class _Step:
    start_s: float
    end_s: float
    entries: list[_Entry]
    tokens: int  #: tokens scheduled (verify + prefill), for iteration_tokens


@dataclass
class EngineStats:
    """Cumulative engine counters (vLLM semantics; see the README)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    steps: int = 0
    fallback_steps: int = 0  #: steps decoded without drafts because the draft model was down
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    finished: dict[str, int] = field(default_factory=dict)
    #: engine-model seconds with a step running, of them drafting, and busy seconds weighted by
    #: the step's compute share (compute / max(memory, compute)): the GPU model's inputs (sim.gpu)
    busy_s: float = 0.0
    draft_s: float = 0.0
    compute_weighted_s: float = 0.0


DraftState = Callable[[int, float], "tuple[bool, float]"]


class Scheduler:
    """Continuous-batching (or per-sequence "independent") engine model with a fake-able clock."""

    def __init__(
        self,
        profile: Profile,
        spec: SpecConfig | None = None,
        draft_state: DraftState | None = None,
        on_step: Callable[[int], None] | None = None,
        max_catchup_s: float = 0.25,
    ) -> None:
        self.p = profile
        self.spec = spec or SpecConfig()
        self.draft_state = draft_state
        self.on_step = on_step  #: called with the tokens each completed step scheduled
        self.max_catchup_s = max_catchup_s
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.kv_reserved = 0
        self.step: _Step | None = None
        self.step_index = 0
        self.draft_available = True
        self.stats = EngineStats(spec_accepted_per_pos=[0] * max(self.spec.k, 0))
        self._heap: list[tuple[float, int, Sequence, _Entry]] = []  # independent mode
        self._counter = 0
        self.independent = profile.batching == "independent"
        self._spec_on = self.spec.enabled  # SpecConfig is frozen: read once, not per step
        self._k_lookahead = self.spec.k if self._spec_on else 0
        # No speculation and no n-gram lookup cost (SpecConfig does not change during a run).
        self._plain_decode = not self._spec_on and self.spec.method != "ngram"
        self._tokens_per_step = profile.tokens_per_step
        # Per-step reads of frozen configuration, hoisted (the engine runs once per chunk).
        self._k = self.spec.k
        self._draft_model = self.spec.method == "draft"
        self._ngram = self.spec.method == "ngram"
        self._divergence_rate = self.spec.divergence_rate

    # ----------------------------------------------------------------- requests
    def kv_need(self, prompt_len: int, output_tokens: int) -> int:
        """KV tokens reserved for a request at admission (prompt + output + K lookahead slots)."""
        return prompt_len + output_tokens + self._k_lookahead

    def submit(self, seq: Sequence, now_s: float) -> None:
        """Queue a request (FCFS). Call :meth:`advance` afterwards to start it."""
        seq.arrival_s = now_s
        if self.spec.method == "ngram":
            seq.ngram = NgramIndex(seq.source, self.p.ngram.min_n, self.p.ngram.max_n)
        self.waiting.append(seq)
        if self.independent:
            self._admit(now_s)

    def abort(self, seq: Sequence) -> None:
        """Drop a request (client went away); frees its slot and KV."""
        if seq.done:
            return
        seq.aborted = True
        if seq in self.running:
            self._release(seq)
        else:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def kv_usage(self) -> float:
        """Fraction of KV capacity holding tokens now (0..1)."""
        used = 0
        for s in self.running:
            used += s.prefilled + s.n_out
        return min(1.0, used / self.p.kv_capacity_tokens)

    # ----------------------------------------------------------------- time
    def next_deadline(self) -> float | None:
        """When :meth:`advance` next has something to do (None: idle until a submit)."""
        if self.independent:
            return self._heap[0][0] if self._heap else None
        if self.step is not None:
            return self.step.end_s
        paused = [s.paused_until for s in self.running]
        return min(paused) if paused else None

    def advance(self, now_s: float) -> list[Emission]:
        """Complete every step due by ``now_s`` and plan the next; returns due emissions."""
        if self.independent:
            return self._advance_independent(now_s)
        out: list[Emission] = []
        while self.step is not None and self.step.end_s <= now_s:
            step = self.step
            self.step = None
            self._complete(step, out)
            start = step.end_s if now_s - step.end_s <= self.max_catchup_s else now_s
            self._plan(start)
        if self.step is None and (self.waiting or self.running):
            self._plan(now_s)
        return out

    # ----------------------------------------------------------------- internals
    def _admit(self, now_s: float) -> None:
        cap = self.p.kv_capacity_tokens
        while self.waiting and len(self.running) < self.p.max_num_seqs:
            s = self.waiting[0]
            # Reserve what the request will really hold: like paged allocation without preemption.
            out = s.max_tokens if s.ignore_eos else min(s.max_tokens, s.text.natural_len)
            need = self.kv_need(s.prompt_len, out)
            if self.kv_reserved + need > cap and self.running:
                break
            self.waiting.popleft()
            s.kv_reserved = need
            s.admitted_s = now_s
            self.kv_reserved += need
            self.running.append(s)
            if self.independent:
                self._plan_one(s, now_s)

    def _release(self, s: Sequence) -> None:
        self.running.remove(s)
        self.kv_reserved -= s.kv_reserved
        s.kv_reserved = 0

    def _draft_ok(self, t: float) -> tuple[bool, float]:
        if not self._spec_on:
            return False, 1.0
        if self.draft_state is None:
            return True, 1.0
        return self.draft_state(self.step_index, t)

    def _decode_entry(self, s: Sequence, spec_on: bool) -> _Entry:
        """Decide what a decoding sequence emits this step (deterministic)."""
        text = s.text
        pos = s.n_out
        remaining = s.max_tokens - pos
        if not s.ignore_eos and text.natural_len < s.max_tokens:
            remaining = text.natural_len - pos
        if remaining < 1:
            remaining = 1
        k = accepted = 0
        if spec_on and remaining > 1:
            k = self._k if self._k < remaining else remaining - 1
            if self._draft_model:
                accepted = text.draft_accepted(pos, k)
            else:
                text.ensure(pos + k)
                tail = (s.source[-3:] + text.tokens[max(0, pos - 3) : pos])[-3:]
                proposal = s.ngram.propose(tail, k) if s.ngram else []
                k = len(proposal)
                while accepted < k and proposal[accepted] == text.tokens[pos + accepted]:
                    accepted += 1
        n = accepted + 1 if accepted < remaining else remaining
        if not k and self._tokens_per_step > 1:
            n = min(self._tokens_per_step, remaining)
        text.ensure(pos + n)
        tokens = text.tokens[pos : pos + n]
        if k and self._divergence_rate > 0.0 and unit_hash(self.spec.seed, text.key, pos) < self._divergence_rate:
            tokens = tokens[:-1] + [text.wrong_token(pos + n - 1)]
        return _Entry(s, 0, False, tokens, k, min(accepted, n - 1) if k else 0)

    def _parts(self, context: int, verify: int, prefill: int, n_decode: int, n_drafting: int,
               slow: float) -> tuple[float, float, float]:
        """(memory-bound s, compute-bound s, drafting s) of one step."""
        p = self.p
        mem_s = p.weights_read_s + p.kv_read_s_per_token * context
        compute_s = p.flops_per_token_s * verify + prefill / p.prefill_tokens_per_s
        draft_s = 0.0
        if self._draft_model:
            if n_drafting:
                draft_s = self._k * (p.draft.pass_s + p.draft.flops_per_token_s * n_drafting) * slow
        elif self._ngram and n_decode:
            draft_s = p.ngram.lookup_s_per_seq * n_decode
        return mem_s, compute_s, draft_s

    def _duration(self, context: int, verify: int, prefill: int, n_decode: int, n_drafting: int, slow: float) -> float:
        mem_s, compute_s, draft_s = self._parts(context, verify, prefill, n_decode, n_drafting, slow)
        return self.p.overhead_s + max(mem_s, compute_s) + draft_s

    def step_seconds(self, batch: int, context_tokens: int, k: int = 0, prefill_tokens: int = 0) -> float:
        """Step time for ``batch`` decoding sequences each verifying ``1 + k`` tokens (model formula)."""
        return self._duration(context_tokens, batch * (1 + k), prefill_tokens, batch, batch if k else 0, 1.0)

    def _plan(self, t: float) -> None:
        self._admit(t)
        spec_on, slow = self._draft_ok(t)
        if self._spec_on:
            self.draft_available = spec_on
        budget = self.p.max_num_batched_tokens
        entries: list[_Entry] = []
        context = verify = prefill = n_decode = n_drafting = 0
        prefilling: list[Sequence] = []
        for s in self.running:
            if s.paused_until > t:
                continue
            if s.prefilled < s.prompt_len:
                prefilling.append(s)
                continue
            e = self._decode_entry(s, spec_on)
            if 1 + e.k > budget:
                continue
            budget -= 1 + e.k
            verify += 1 + e.k
            context += s.prompt_len + s.n_out
            n_decode += 1
            if e.k:
                n_drafting += 1
            entries.append(e)
        for s in prefilling:
            if budget <= 0:
                break
            chunk = min(s.prompt_len - s.prefilled, budget)
            budget -= chunk
            prefill += chunk
            context += s.prefilled + chunk
            entries.append(_Entry(s, prefill_chunk=chunk, completes_prefill=s.prefilled + chunk == s.prompt_len))
        if not entries:
            return
        if self._spec_on and not spec_on:
            self.stats.fallback_steps += 1
        mem_s, compute_s, draft_s = self._parts(context, verify, prefill, n_decode, n_drafting, slow)
        dur = self.p.overhead_s + max(mem_s, compute_s) + draft_s
        st = self.stats
        st.busy_s += dur
        st.draft_s += draft_s
        peak = max(mem_s, compute_s)
        if peak > 0:  # a profile may zero both (overhead-only steps): no compute share then
            st.compute_weighted_s += dur * compute_s / peak
        self.step = _Step(t, t + dur, entries, verify + prefill)
        self.step_index += 1

    def _complete(self, step: _Step, out: list[Emission]) -> None:
        self.stats.steps += 1
        if self.on_step is not None:
            self.on_step(step.tokens)
        for e in step.entries:
            self._apply(e, step.end_s, out)
        # Sequences that finished free their slots; waiting ones are admitted at next plan.

    def _apply(self, e: _Entry, t: float, out: list[Emission]) -> None:
        s = e.seq
        if s.finish_reason is not None or s.aborted:  # Sequence.done, inlined: once per chunk
            return
        st = self.stats
        if e.prefill_chunk:
            s.prefilled += e.prefill_chunk
            if not e.completes_prefill:
                return
            st.prompt_tokens += s.prompt_len
            tokens = [s.text.token(0)] if s.n_out == 0 else []
            if not tokens:
                return
        else:
            tokens = e.tokens or []
            k = e.k
            if k:
                accepted = e.accepted
                st.spec_drafts += 1
                st.spec_draft_tokens += k
                st.spec_accepted_tokens += accepted
                if accepted:
                    per = st.spec_accepted_per_pos
                    for i in range(accepted):
                        per[i] += 1
                s.spec_steps += 1
                s.spec_drafted += k
                s.spec_accepted += accepted
                if not s.accept_hist:
                    s.accept_hist = [0] * (self._k + 1)
                s.accept_hist[accepted] += 1
        n = len(tokens)
        chunk = tokens[0] if n == 1 else "".join(tokens)
        finish = None
        n_out = s.n_out = s.n_out + n
        st.generation_tokens += n
        if s.first_token_s is None:
            s.first_token_s = t
        if not s.ignore_eos and n_out >= s.text.natural_len:
            finish = "stop"
        elif n_out >= s.max_tokens:
            finish = "length"
        if s.stops:
            # Like vLLM: hold back the last len(stop)-1 characters so a stop string that spans
            # chunks is never partly streamed; the stop string itself is not output.
            window = s.out_tail + chunk
            cut = min((i for i in (window.find(x) for x in s.stops) if i >= 0), default=-1)
            if cut >= 0:
                chunk, finish, s.out_tail = window[:cut], "stop", ""
            elif finish is not None or s.max_stop <= 1:
                chunk, s.out_tail = window, ""
            else:
                h = s.max_stop - 1
                chunk, s.out_tail = window[:-h], window[-h:]
        if finish is not None:
            s.finish_reason = finish
            s.finished_s = t
            st.finished[finish] = st.finished.get(finish, 0) + 1
            if s in self.running:
                self._release(s)
        elif s.stall_after is not None and not s.stalled and n_out >= s.stall_after:
            s.stalled = True
            s.paused_until = t + s.stall_s
        pieces = tokens if (n > 1 and not e.k and self._tokens_per_step > 1 and not s.stops) else None
        out.append(Emission(s, chunk, n, finish, t, pieces))

    # ----------------------------------------------------------------- independent mode
    def _plan_one(self, s: Sequence, t: float) -> None:
        """Independent batching: the sequence steps alone (batch of one) on its own clock."""
        if s.paused_until > t:
            t = s.paused_until
        if s.prefilled < s.prompt_len:
            e = _Entry(s, prefill_chunk=s.prompt_len - s.prefilled, completes_prefill=True)
            dur = self._duration(s.prompt_len, 0, e.prefill_chunk, 0, 0, 1.0)
        elif self._plain_decode:
            # The commonest step of all (decode, no speculation), once per emitted chunk: the
            # same arithmetic as _duration(context, 1, 0, 1, 0, 1.0), without the general path.
            e = self._decode_entry(s, False)
            p = self.p
            dur = p.overhead_s + max(p.weights_read_s + p.kv_read_s_per_token * (s.prompt_len + s.n_out),
                                     p.flops_per_token_s)
        else:
            spec_on, slow = self._draft_ok(t)
            e = self._decode_entry(s, spec_on)
            if self._spec_on and not spec_on:
                self.stats.fallback_steps += 1
            dur = self._duration(s.prompt_len + s.n_out, 1 + e.k, 0, 1, 1 if e.k else 0, slow)
        self.step_index += 1
        self._counter += 1
        heapq.heappush(self._heap, (t + dur, self._counter, s, e))

    def _advance_independent(self, now_s: float) -> list[Emission]:
        # Runs once per emitted chunk: attribute reads hoisted, Sequence.done inlined.
        out: list[Emission] = []
        heap, pop, stats, on_step = self._heap, heapq.heappop, self.stats, self.on_step
        catchup_s = self.max_catchup_s
        while heap and heap[0][0] <= now_s:
            due, _, s, e = pop(heap)
            if s.finish_reason is not None or s.aborted:
                continue
            stats.steps += 1
            if on_step is not None:
                on_step(e.prefill_chunk + (len(e.tokens or ()) and 1 + e.k))
            self._apply(e, due, out)
            if s.finish_reason is not None:
                self._admit(due)
            else:
                self._plan_one(s, due if now_s - due <= catchup_s else now_s)
        return out
