"""Locust user classes: the four traffic types, and the open-loop dispatcher.

Closed loop (concurrency steps): every user runs one request at a time -- ``QAUser``,
``SummarizationUser``, ``CodeUser``, ``MultiTurnUser`` (and the opt-in ``AbnormalUser``);
their Locust weights come from the scenario's class weights. Within a kind, a user sticks
to one scenario task (chosen by weight at start), so per-task statistics stay meaningful.

Open loop (rate steps): one ``OpenLoopUser`` per worker process dispatches requests on an
arrival schedule, independently of response times (bounded by ``max_in_flight``). Each
request's latency counts from its *scheduled* time; lag is recorded and counted.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Iterator
from typing import Any

import gevent
import gevent.pool
from geventhttpclient.url import URL
from locust import FastHttpUser, constant, task
from locust.exception import StopUser

from tokenswarm.load import runtime
from tokenswarm.load.context import RunContext, request_key
from tokenswarm.wire.client import StreamHooks, stream_call
from tokenswarm.wire.limits import StreamLimits
from tokenswarm.wire.pool import tune_pool
from tokenswarm.wire.transport import PoolTransport, Transport
from tokenswarm.workload import quality
from tokenswarm.workload.arrivals import ArrivalProcess, schedule
from tokenswarm.workload.draw import StratifiedDraw
from tokenswarm.workload.replay import ReplayPrompts
from tokenswarm.workload.trace import load_trace

KIND_CLASSES: dict[str, str] = {
    "qa": "QAUser",
    "summarization": "SummarizationUser",
    "code": "CodeUser",
    "multi_turn": "MultiTurnUser",
    "abnormal": "AbnormalUser",
    "extraction": "ExtractionUser",
}


def pick_task(tasks: list[Any], rng: random.Random, deal: StratifiedDraw | None = None) -> Any:
    """The next request's task: dealt by ``deal`` (``task_draw: stratified``), else drawn by weight."""
    if deal is not None:
        return tasks[deal.next_index()]
    weights = [max(t.weight, 0.0) for t in tasks]
    return rng.choices(tasks, weights=weights)[0]


def pick_model(models: tuple[tuple[str, float], ...], rng: random.Random) -> str | None:
    """The model of one request (or conversation) by weight; ``None``: the run's one model.

    Draws from ``rng`` only when there is a choice, so a one-model scenario sends the same
    prompts as before the split existed.
    """
    if not models:
        return None
    if len(models) == 1:
        return models[0][0]
    return rng.choices([m for m, _ in models], weights=[w for _, w in models])[0]


def may_send(ctx: RunContext, user: Any) -> bool:
    """Whether a task may send its next request: not once the run is ending (Locust's
    ``test_stopping``, before it stops any user) nor once Locust asked ``user`` to stop (a
    ramp-down, the run's end). A graceful stop lets the requests in flight finish; it must not
    start new ones, which the end of the stop would then cancel."""
    return not ctx.stopping and not getattr(user, "stop_asked", False)


def task_deal(ctx: RunContext, tasks: list[Any], ordinal: int) -> StratifiedDraw | None:
    """A sender's stratified deal under ``traffic.task_draw: stratified`` (None: a random draw)."""
    if getattr(ctx.scenario.traffic, "task_draw", "per_user") != "stratified":
        return None
    return StratifiedDraw([t.weight for t in tasks], offset=ordinal)


class Conversationalist:
    """Runs requests for one user or dispatch slot; shared by closed and open loop."""

    def __init__(self, ctx: RunContext, user: FastHttpUser, transport: Transport, user_class: str) -> None:
        self.ctx = ctx
        self.user = user
        self.transport = transport
        self.user_class = user_class
        events = ctx.events
        self.hooks = None
        if events is not None:
            first, chunk = events.llm_first_token, events.llm_chunk
            # Only build hooks when someone listens: the per-chunk path stays free otherwise.
            if first._handlers or chunk._handlers:
                self.hooks = StreamHooks(
                    on_first_token=(lambda base, ms: first.fire(task=base["task"], ttft_ms=ms, base=base))
                    if first._handlers else None,
                    on_chunks=(lambda base, ms, n: chunk.fire(task=base["task"], offset_ms=ms, chunks=n, base=base))
                    if chunk._handlers else None,
                )

    def send(self, task_cfg: Any, payload_key: str, payload: Any, max_tokens: int, scheduled_s: float,
             *, session_id: str | None = None, turn: int | None = None, extra: dict[str, Any] | None = None,
             abnormal: str | None = None, check_json: bool = False,
             schema: dict[str, Any] | None = None, model: str | None = None) -> tuple[Any, str]:
        ctx = self.ctx
        sampling = task_cfg.sampling.params()
        if task_cfg.extra_body:  # extra request-body fields: sent, and part of the request key
            sampling = {**task_cfg.extra_body, **sampling}
        if extra:
            sampling = {**sampling, **{k: v for k, v in extra.items() if k != "max_tokens"}}
            max_tokens = extra.get("max_tokens", max_tokens)
        key = request_key(ctx.api, payload, max_tokens, sampling)
        body = ctx.body(payload_key, payload, max_tokens, sampling, model=model)
        base = ctx.base(task=task_cfg.name, user_class=self.user_class, scheduled_s=scheduled_s, key=key,
                        session_id=session_id, turn=turn, max_tokens=max_tokens, temperature=sampling.get("temperature"),
                        extra={"abnormal": abnormal} if abnormal else None, model=model)
        target = ctx.scenario.target
        ctx.requests_started += 1
        ctx.in_flight += 1
        try:
            record, text = stream_call(
                self.transport, ctx.path, body, ctx.headers, identity=base, anchor=ctx.anchor,
                first_token_timeout_s=target.first_token_timeout_s, total_timeout_s=target.total_timeout_s,
                keep_output=ctx.keep_outputs, hooks=self.hooks,
                on_cancel=lambda rec, _text: ctx.emit(rec, self.user),
                cancel_after_first_token=abnormal == "cancel_early", scheduled_s=scheduled_s,
                limits=StreamLimits.for_request(max_tokens if type(max_tokens) is int else None,
                                                target.output_tokens_factor, target.max_response_bytes),
            )
        finally:
            ctx.in_flight -= 1
        if check_json and record.outcome == "ok":  # quality of structured output, judged per answer
            json_ok, schema_ok = quality.check_json(text, schema)
            record = dataclasses.replace(record, json_valid=json_ok, schema_valid=schema_ok)
        return ctx.emit(record, self.user), text

    def single(self, task_cfg: Any, rng: random.Random, scheduled_s: float) -> None:
        prompt = self.ctx.prompt_sources[task_cfg.name].next_prompt(rng)
        model = pick_model(self.ctx.scenario.models_of(task_cfg), rng)
        if prompt.messages is not None:
            payload_key, payload = "messages", list(prompt.messages)
        else:
            payload_key, payload = "prompt", prompt.text
        extra = dict(prompt.params) if prompt.params else None
        self.send(task_cfg, payload_key, payload, prompt.max_tokens, scheduled_s, extra=extra,
                  abnormal=prompt.abnormal, check_json=task_cfg.kind == "extraction", schema=prompt.schema,
                  model=model)

    def conversation(self, task_cfg: Any, rng: random.Random, scheduled_s: float) -> None:
        """All turns of one conversation; each turn re-sends the history with the real replies."""
        ctx = self.ctx
        conv = ctx.prompt_sources[task_cfg.name].conversation(rng)
        session_id = uuid.UUID(int=rng.getrandbits(128)).hex[:16]
        model = pick_model(ctx.scenario.models_of(task_cfg), rng)  # a conversation stays with one model
        history: list[dict[str, str]] = [{"role": "system", "content": conv.system}] if conv.system else []
        prompt_text = f"{conv.system}\n\n" if conv.system else ""
        for turn in range(conv.turns):
            if turn:
                gevent.sleep(conv.think_time_s(turn))
                if not may_send(ctx, self.user):  # the run is ending: the conversation ends here
                    return
                scheduled_s = ctx.clock()
            msg = conv.user_message(turn)
            payload: list[dict[str, str]] | str
            if ctx.api == "chat":
                history.append({"role": "user", "content": msg})
                payload_key, payload = "messages", list(history)
            else:
                prompt_text += f"User: {msg}\nAssistant:"
                payload_key, payload = "prompt", prompt_text
            record, text = self.send(task_cfg, payload_key, payload, conv.max_tokens(turn), scheduled_s,
                                     session_id=session_id, turn=turn, model=model)
            if record.outcome != "ok":
                return  # a conversation cannot continue without the reply
            if ctx.api == "chat":
                history.append({"role": "assistant", "content": text})
            else:
                prompt_text += f" {text}\n"


class _TokenswarmUser(FastHttpUser):
    """What every tokenswarm user shares: timeouts (set from the scenario) and the run context."""

    abstract = True
    wait_time = constant(0)
    # network_timeout bounds each socket read; our gevent deadlines bound TTFT and the total.
    network_timeout = 600.0
    connection_timeout = 10.0
    #: set by :meth:`_context` in ``on_start``; a task never runs without it (it raises StopUser first)
    ctx: RunContext
    #: Locust asked this user to stop (see :meth:`stop`)
    stop_asked = False

    def stop(self, force: bool = False) -> bool:
        """Locust stops this user (a ramp-down, the run's end): noted before Locust acts.

        Locust kills a user it finds between tasks (``waiting``) through a callback of the event
        loop. A user whose own wake-up was already queued runs first and would start one more
        request, which the kill then cancels mid-way -- on a busy machine, seen as ``cancelled``
        records at a plan's graceful end. With the note, that task sends nothing (:func:`may_send`).
        """
        self.stop_asked = True
        return bool(super().stop(force))

    def _next_task_or_stop(self) -> None:
        """Raise StopUser instead of starting a task: the run was aborted at start (no context),
        or it is ending, or this user was asked to stop."""
        if self.ctx is None or not may_send(self.ctx, self):
            raise StopUser()

    def _context(self) -> RunContext | None:
        # None: the run was aborted at start (target down, bad config). on_start returns and the
        # first task raises StopUser, which Locust handles quietly (from on_start it logs a traceback).
        ctx = runtime.context_or_none()
        self.ctx = ctx  # type: ignore[assignment]  # None only until the first task raises StopUser
        return ctx

    def _transport(self) -> PoolTransport:
        """This user's transport: its geventhttpclient connection pool to the target
        (FastHttpUser's settings) on the run's clock."""
        client = self.client.client.clientpool.get_client(URL(self.ctx.base_url))
        tune_pool(client, keep_alive=self.ctx.scenario.target.keep_alive)  # before its first connection exists
        return PoolTransport(client, self.ctx.clock)


class LLMUser(_TokenswarmUser):
    """Base of the closed-loop users: one request in flight, think time from the scenario."""

    abstract = True
    kind = ""
    concurrency = 2

    def on_start(self) -> None:
        ctx = self._context()
        if ctx is None:
            return
        tasks = [t for t in ctx.scenario.traffic.classes if t.kind == self.kind and t.weight > 0]
        # Deterministic per (seed, worker, class, user ordinal): two runs of one scenario send the
        # same prompts in the same order per user, so runs join request by request (A/B compare).
        self.rng = ctx.rng_for(self.kind, ctx.next_user_ordinal(type(self).__name__))
        self.task_cfg = pick_task(tasks, self.rng) if tasks else None
        self.runner_ = Conversationalist(ctx, self, self._transport(), type(self).__name__)

    @task
    def one_request(self) -> None:
        self._next_task_or_stop()
        if self.task_cfg is None or self.ctx.halted:  # halted: the circuit breaker stopped the run
            gevent.sleep(1.0)
            return
        scheduled = self.ctx.clock()
        if self.kind == "multi_turn":
            self.runner_.conversation(self.task_cfg, self.rng, scheduled)
        else:
            self.runner_.single(self.task_cfg, self.rng, scheduled)
        think = self.task_cfg.think_time_s.sample(self.rng)
        if think > 0:
            gevent.sleep(think)


class QAUser(LLMUser):
    """Short questions, short-to-medium answers."""

    kind = "qa"


class SummarizationUser(LLMUser):
    """Long documents with a short summary instruction."""

    kind = "summarization"


class CodeUser(LLMUser):
    """Code completion and generation from real (stdlib) source code."""

    kind = "code"


class MultiTurnUser(LLMUser):
    """Conversations of N turns sending the whole history, sticky to this user."""

    kind = "multi_turn"


class AbnormalUser(LLMUser):
    """Opt-in abnormal inputs (empty prompts, over-long prompts, odd Unicode, bad parameters)."""

    kind = "abnormal"


class MixedUser(_TokenswarmUser):
    """Closed loop with ``traffic.task_draw: per_request`` (or ``stratified``): every request draws its task.

    One user sends every task of the scenario (whatever kinds it defines), so the mix holds at
    any concurrency, including 1. The draw uses the user's seeded generator, so two runs of one
    scenario draw the same task sequence per user and still join request by request.
    """

    # Not an LLMUser subclass: Locust would inherit that class's task too (it sleeps without a task).
    kind = "mixed"
    concurrency = 2

    def on_start(self) -> None:
        ctx = self._context()
        if ctx is None:  # the run was aborted at start: the first task raises StopUser
            return
        self.tasks_ = [t for t in ctx.scenario.traffic.classes if t.weight > 0]
        ordinal = ctx.next_user_ordinal(type(self).__name__)
        self.rng = ctx.rng_for(self.kind, ordinal)
        self.deal = task_deal(ctx, self.tasks_, ordinal)
        self.task_cfg = None
        self.runner_ = Conversationalist(ctx, self, self._transport(), type(self).__name__)

    @task
    def one_request(self) -> None:
        self._next_task_or_stop()
        task_cfg = pick_task(self.tasks_, self.rng, self.deal)
        scheduled = self.ctx.clock()
        if task_cfg.kind == "multi_turn":
            self.runner_.conversation(task_cfg, self.rng, scheduled)
        else:
            self.runner_.single(task_cfg, self.rng, scheduled)
        think = task_cfg.think_time_s.sample(self.rng)
        if think > 0:
            gevent.sleep(think)


class ExtractionUser(LLMUser):
    """A document or record plus an instruction to return its fields as JSON (quality checked)."""

    kind = "extraction"


class OpenLoopUser(_TokenswarmUser):
    """One per worker: dispatches requests on the arrival schedule of the current rate step."""

    concurrency = 1024
    # Weight 1 at import: Locust drops zero-weight classes when it builds the Environment. The
    # plugin sets the real weights at init (0 here unless the scenario is open-loop).

    def on_start(self) -> None:
        ctx = self._context()
        if ctx is None:
            return
        self.tasks_ = [t for t in ctx.scenario.traffic.classes if t.weight > 0]
        ordinal = ctx.next_user_ordinal("OpenLoopUser")
        self.rng = ctx.rng_for("open", ordinal)
        self.deal = task_deal(ctx, self.tasks_, ctx.worker_index + ordinal)
        self.transport = self._transport()
        per_worker_cap = max(1, ctx.scenario.load.max_in_flight // max(1, ctx.worker_count))
        self.pool = gevent.pool.Pool(per_worker_cap)

    @task
    def dispatch(self) -> None:
        ctx = self.ctx
        if ctx is None:
            raise StopUser()
        load = ctx.scenario.load
        if load.mode == "replay":
            try:
                self._replay(load)
            finally:
                self.pool.kill(block=True, timeout=5)  # in-flight streams become 'cancelled' records
            return
        times: Iterator[float] | None = None
        rate_seen: float | None = None
        next_s = ctx.clock()
        try:
            while not ctx.stopping and not ctx.halted:
                rate = ctx.rate_per_worker()
                if rate is None:
                    gevent.sleep(0.05)
                    next_s = ctx.clock()
                    continue
                if rate != rate_seen:  # a new step's rate: a new schedule from the last send time
                    times = schedule(next_s, ArrivalProcess(rate, load.arrival, load.burstiness, self.rng))
                    rate_seen = rate
                assert times is not None
                next_s = next(times)
                wait = next_s - ctx.clock()
                if wait > 0:
                    gevent.sleep(wait)
                if self.pool.full():
                    self.pool.wait_available()  # at the in-flight cap: the lag shows and counts
                ctx.note_late((ctx.clock() - next_s) * 1000.0)
                task_cfg = pick_task(self.tasks_, self.rng, self.deal)
                rng = random.Random(self.rng.getrandbits(64))
                self.pool.spawn(self._one, task_cfg, rng, next_s)
            self.pool.join(timeout=load.stop_timeout_s)
        finally:
            self.pool.kill(block=True, timeout=5)  # in-flight streams become 'cancelled' records

    def _one(self, task_cfg: Any, rng: random.Random, scheduled_s: float) -> None:
        conv = Conversationalist(self.ctx, self, self.transport, f"OpenLoop:{task_cfg.kind}")
        if task_cfg.kind == "multi_turn":
            conv.conversation(task_cfg, rng, scheduled_s)
        else:
            conv.single(task_cfg, rng, scheduled_s)


    def _replay(self, load: Any) -> None:
        """This worker's share of the trace's one global schedule: entry ``i`` goes to worker ``i mod n``.

        The schedule starts with the step's steady window (the master's epoch, broadcast to every
        worker); entry ``i`` is due ``offset_s / speed`` later, and its latency counts from then.
        """
        ctx = self.ctx
        while not ctx.stopping and (ctx.step_kind != "rate" or ctx.step_steady_at is None):
            gevent.sleep(0.02)
        if ctx.stopping:
            return
        trace = load_trace(load.trace, load.trace_format)
        counter = next((s.counter for s in ctx.prompt_sources.values()), None)
        self.replay_prompts = ReplayPrompts(counter, ctx.scenario.traffic.seed, ctx.api, load.trace_block_tokens)
        steady_at = ctx.step_steady_at
        assert steady_at is not None  # the wait above ended on it
        t0 = ctx.anchor.mono_s + (steady_at - ctx.anchor.wall_s)  # on this process's clock
        seed = ctx.scenario.traffic.seed
        for i in range(ctx.worker_index % ctx.worker_count, len(trace.entries), ctx.worker_count):
            if ctx.stopping:
                break
            entry = trace.entries[i]
            due = t0 + entry.offset_s / load.speed
            wait = due - ctx.clock()
            if wait > 0:
                gevent.sleep(wait)
            if self.pool.full():
                self.pool.wait_available()  # at the in-flight cap: the lag shows and counts
            ctx.note_late((ctx.clock() - due) * 1000.0)
            self.pool.spawn(self._replay_one, entry, random.Random(f"{seed}:replay:{i}"), due)
        while not ctx.stopping:  # the whole trace is out: wait for the end of the step
            gevent.sleep(0.1)
        self.pool.join(timeout=load.stop_timeout_s)

    def _replay_one(self, entry: Any, rng: random.Random, scheduled_s: float) -> None:
        task_cfg = self.tasks_[0]
        if entry.task and entry.task != task_cfg.name:  # a tokenswarm records trace keeps its tasks
            task_cfg = dataclasses.replace(task_cfg, name=entry.task)
        payload_key, payload = self.replay_prompts.payload(entry.input_tokens, entry.hash_ids, rng)
        # the recorded output length is asked for exactly, unless sampling.ignore_eos says otherwise
        extra = {"ignore_eos": True} if task_cfg.sampling.ignore_eos is None else None
        Conversationalist(self.ctx, self, self.transport, "Replay").send(
            task_cfg, payload_key, payload, entry.output_tokens, scheduled_s, extra=extra,
            model=pick_model(self.ctx.scenario.models_of(task_cfg), rng))


CLOSED_LOOP_USERS = (QAUser, SummarizationUser, CodeUser, MultiTurnUser, AbnormalUser, ExtractionUser, MixedUser)
